package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/backend/redislock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// clusterURL is the URL of a cluster: its first node, the others as addr=.
func clusterURL(c *testenv.RedisCluster, query ...string) string {
	addrs := c.Addrs()
	q := query
	for _, a := range addrs[1:] {
		q = append(q, "addr="+a)
	}
	return "redis://" + addrs[0] + "?" + strings.Join(q, "&")
}

// clusterHarness runs the conformance suite over a *redis.ClusterClient
// per driver. It has no Endpoints: the suite's proxies cannot stand in
// front of a cluster, whose MOVED replies name the nodes' own addresses.
func clusterHarness(c *testenv.RedisCluster, fair bool, opts ...redislock.Option) dlocktest.Harness {
	return dlocktest.Harness{
		Open: func(ctx context.Context, _ []string) (driver.Driver, error) {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
			if err := rdb.Ping(ctx).Err(); err != nil {
				rdb.Close()
				return nil, err
			}
			d, err := redislock.New(rdb, opts...)
			if err != nil {
				rdb.Close()
				return nil, err
			}
			return clusterClosing{d, rdb}, nil
		},
		URL:  clusterURL(c),
		Fair: fair,
		NoEndpointsReason: "a Redis Cluster's MOVED replies name the nodes' own addresses, " +
			"so a client follows them past any proxy the suite puts in front of it",
	}
}

type clusterClosing struct {
	*redislock.Driver
	rdb *redis.ClusterClient
}

func (c clusterClosing) Close() error { c.Driver.Close(); return c.rdb.Close() }

// TestOnThreeMasterCluster runs everything against one three-master Redis Cluster.
func TestOnThreeMasterCluster(t *testing.T) {
	cl := testenv.StartRedisCluster(t, 3)
	t.Run("Conformance", func(t *testing.T) {
		dlocktest.Run(t, clusterHarness(cl, false))
	})
	t.Run("ConformanceFair", func(t *testing.T) {
		dlocktest.Run(t, clusterHarness(cl, true, redislock.WithWaiterTTL(600*time.Millisecond)))
	})
	t.Run("NamesOnEveryMasterAreLockedAndListed", func(t *testing.T) { testClusterNames(t, cl) })
	t.Run("ReleaseWakesWaiterOnEveryMaster", func(t *testing.T) { testClusterWakeUp(t, cl) })
	t.Run("OpensFromOneSeed", func(t *testing.T) {
		c := open(t, "redis://"+cl.Addrs()[len(cl.Nodes)-1]+"?cluster=true")
		ctx := testenv.Context(t, 30*time.Second)
		for _, ns := range namesByMaster(t, cl, "seed/", 1) {
			l, err := c.Mutex(ns[0]).Lock(ctx)
			if err != nil {
				t.Fatalf("Lock(%q): %v", ns[0], err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// namesByMaster finds, for each master, perNode lock names whose keys the
// cluster places on it: CLUSTER KEYSLOT of the lock key, looked up in
// CLUSTER SHARDS.
func namesByMaster(t *testing.T, cl *testenv.RedisCluster, prefix string, perNode int) map[string][]string {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	rdb := redis.NewClient(&redis.Options{Addr: cl.Addrs()[0]})
	defer rdb.Close()
	shards, err := rdb.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	masterOf := func(slot int64) string {
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start <= slot && slot <= r.End {
					for _, n := range sh.Nodes {
						if n.Role == "master" {
							return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
						}
					}
				}
			}
		}
		t.Fatalf("slot %d is in no shard of CLUSTER SHARDS %+v", slot, shards)
		return ""
	}
	byMaster := map[string][]string{}
	for i := 0; len(byMaster) < len(cl.Nodes) || minLen(byMaster) < perNode; i++ {
		if i > 1000 {
			t.Fatalf("1000 names fill only %d masters: %v", len(byMaster), byMaster)
		}
		name := fmt.Sprintf("%sname-%d", prefix, i)
		slot, err := rdb.ClusterKeySlot(ctx, redisscript.KeysFor(redisscript.DefaultPrefix, name).Lock).Result()
		if err != nil {
			t.Fatal(err)
		}
		if m := masterOf(slot); len(byMaster[m]) < perNode {
			byMaster[m] = append(byMaster[m], name)
		}
	}
	for _, addr := range cl.Addrs() {
		if len(byMaster[addr]) == 0 {
			t.Fatalf("CLUSTER SHARDS names masters %v, not the started %v", byMaster, cl.Addrs())
		}
	}
	return byMaster
}

func minLen(m map[string][]string) int {
	n := -1
	for _, v := range m {
		if n < 0 || len(v) < n {
			n = len(v)
		}
	}
	return n
}

// Names whose keys live on different masters are locked, inspected, listed
// and handed over independently, each with its own tokens.
func testClusterNames(t *testing.T, cl *testenv.RedisCluster) {
	prefix := fmt.Sprintf("spread-%d/", time.Now().UnixNano())
	byMaster := namesByMaster(t, cl, prefix, 10)
	a := open(t, clusterURL(cl))
	b := open(t, clusterURL(cl))
	ctx := testenv.Context(t, time.Minute)
	var names []string
	held := map[string]*dlock.Lease{}
	for _, ns := range byMaster {
		for _, name := range ns {
			names = append(names, name)
			l, err := a.Mutex(name).Lock(ctx)
			if err != nil {
				t.Fatalf("Lock(%q): %v", name, err)
			}
			held[name] = l
		}
	}
	list, err := b.List(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(names) {
		t.Fatalf("List(%q) found %d locks, want %d (one per name, on every master)", prefix, len(list), len(names))
	}
	for _, name := range names {
		if _, err := b.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock(%q) while held: %v, want ErrNotAcquired", name, err)
		}
		in, err := b.Inspect(ctx, name)
		if err != nil || !in.Held || in.Token != held[name].Token() {
			t.Fatalf("Inspect(%q) = %+v, %v; want held with token %d", name, in, err, held[name].Token())
		}
	}
	// Every name changes hands to a waiter of the other client.
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := b.Mutex(name).Lock(ctx)
			if err != nil {
				errs <- fmt.Errorf("Lock(%q) by the waiter: %w", name, err)
				return
			}
			if l.Token() <= held[name].Token() {
				errs <- fmt.Errorf("%q: token %d after %d", name, l.Token(), held[name].Token())
			}
			errs <- l.Unlock(ctx)
		}()
	}
	for _, name := range names {
		waitWaiters(t, a, name, 1)
		if err := held[name].Unlock(ctx); err != nil {
			t.Fatalf("Unlock(%q): %v", name, err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// On a cluster a release cannot hand the lock over (PUBLISH counts only
// the receiving node's subscribers), so it wakes the first waiter with a
// message on the lock's channel, which PUBLISH spreads to every node. The
// waiter's pub/sub connection is on one node, and the locks are on every
// master. Both the lease TTL and the waiter TTL are far longer than the
// time the test gives a woken waiter: the waiter's fallback poll comes no
// sooner than a sixth of the waiter TTL after its attempt, so a grant
// before that came from the message.
func testClusterWakeUp(t *testing.T, cl *testenv.RedisCluster) {
	const waiterTTL = 6 * time.Minute // the earliest fallback poll: a minute after an attempt
	prefix := fmt.Sprintf("wake-%d/", time.Now().UnixNano())
	byMaster := namesByMaster(t, cl, prefix, 1)
	u := clusterURL(cl, "waiter_ttl="+waiterTTL.String())
	for _, fair := range []bool{false, true} {
		var opts []dlock.Option
		if fair {
			opts = append(opts, dlock.WithFair())
		}
		holder := open(t, u, append(opts, dlock.WithTTL(10*time.Minute))...)
		waiter := open(t, u, opts...)
		for master, ns := range byMaster {
			name := ns[0] + fmt.Sprint(fair)
			ctx := testenv.Context(t, 2*time.Minute)
			l, err := holder.Mutex(name).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			start := time.Now()
			go func() {
				l, err := waiter.Mutex(name).Lock(ctx)
				if err == nil {
					err = l.Unlock(ctx)
				}
				got <- err
			}()
			waitWaiters(t, holder, name, 1)
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("fair=%v, lock on %s: waiter: %v", fair, master, err)
				}
			case <-time.After(time.Until(start.Add(waiterTTL / 6))):
				t.Fatalf("fair=%v, lock on %s: the waiter was not granted before its first fallback poll: the release's message did not wake it", fair, master)
			}
		}
	}
}

// A cluster URL is go-redis's (seeds as addr=), or one seed with
// cluster=true; the driver's own parameters work on both.
func TestParseClusterURL(t *testing.T) {
	for _, c := range []struct {
		url   string
		addrs []string
		tls   bool
	}{
		{"redis://u:pw@h1:7000?addr=h2:7001&addr=h3:7002&prefix=p&pool_size=3", []string{"h1:7000", "h2:7001", "h3:7002"}, false},
		{"rediss://h1:7000/0?cluster=true&skip_verify=true", []string{"h1:7000"}, true},
	} {
		u, _ := url.Parse(c.url)
		opt, _, err := redislock.ParseClusterURL(u)
		if err != nil {
			t.Errorf("ParseClusterURL(%s): %v", c.url, err)
			continue
		}
		if !slices.Equal(opt.Addrs, c.addrs) || (opt.TLSConfig != nil) != c.tls {
			t.Errorf("ParseClusterURL(%s): addrs %v, TLS %v; want %v, %v", c.url, opt.Addrs, opt.TLSConfig != nil, c.addrs, c.tls)
		}
	}
	for _, bad := range []string{"redis://h1:7000/3?cluster=true", "redis://h1:7000?cluster=maybe", "redis://h1:7000?addr=nonsense"} {
		u, _ := url.Parse(bad)
		if _, err := redislock.Open(context.Background(), u); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("Open(%s) = %v, want ErrInvalidOption", bad, err)
		}
	}
}
