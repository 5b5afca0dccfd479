package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/redlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

func TestMain(m *testing.M) { dlocktest.Main(m) }

func startNodes(t *testing.T, n int) []*testenv.Redis {
	nodes := make([]*testenv.Redis, n)
	for i := range nodes {
		nodes[i] = testenv.StartRedis(t)
	}
	return nodes
}

func addrs(nodes []*testenv.Redis) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Addr)
	}
	return out
}

// newDriver is a driver with clients of its own over addrs.
func newDriver(addrs []string) *redlock.Driver {
	var clients []redis.UniversalClient
	for _, a := range addrs {
		clients = append(clients, redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1}))
	}
	d, err := redlock.New(clients)
	if err != nil {
		panic(err) // New refuses only bad options, and there are none
	}
	return d
}

func harness(nodes []*testenv.Redis) dlocktest.Harness {
	return dlocktest.Harness{
		Open: func(ctx context.Context, proxied []string) (driver.Driver, error) {
			a := addrs(nodes)
			if proxied != nil {
				a = proxied
			}
			return newDriver(a), nil
		},
		Endpoints: addrs(nodes),
		URL:       "redlock://" + strings.Join(addrs(nodes), ","),
	}
}

func TestConformanceThreeNodes(t *testing.T) { dlocktest.Run(t, harness(startNodes(t, 3))) }
func TestConformanceFiveNodes(t *testing.T)  { dlocktest.Run(t, harness(startNodes(t, 5))) }

func open(t *testing.T, nodes []*testenv.Redis) *dlock.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dlock.Open(ctx, "redlock://"+strings.Join(addrs(nodes), ","))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func lockUnlock(t *testing.T, c *dlock.Client, name string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.Mutex(name, dlock.WithTTL(2*time.Second)).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock(%q): %v", name, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock(%q): %v", name, err)
	}
	return l.Token()
}

func TestOneOfThreeNodesDownStillGrants(t *testing.T) {
	nodes := startNodes(t, 3)
	a, b := open(t, nodes), open(t, nodes)
	before := lockUnlock(t, a, "k")
	nodes[1].Kill()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	la, err := a.Mutex("k").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock with one node of three down: %v", err)
	}
	if la.Token() <= before {
		t.Errorf("token %d after a node died, want > %d", la.Token(), before)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		lb, err := b.Mutex("k").Lock(ctx)
		if err != nil {
			t.Errorf("waiting Lock with one node down: %v", err)
		}
		got <- lb
	}()
	select {
	case <-got:
		t.Fatal("a second client was granted the held lock")
	case <-time.After(300 * time.Millisecond):
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if lb == nil {
		return
	}
	if lb.Token() <= la.Token() {
		t.Errorf("waiter's token %d, want > %d", lb.Token(), la.Token())
	}
	_ = lb.Unlock(ctx)
}

func TestTwoOfThreeNodesDownRefusesClearly(t *testing.T) {
	nodes := startNodes(t, 3)
	c := open(t, nodes)
	lockUnlock(t, c, "k")
	nodes[0].Kill()
	nodes[2].Kill()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if l, err := c.Mutex("k").TryLock(ctx); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("TryLock with two of three nodes down = %v, %v; want ErrUnavailable", l, err)
	} else if !strings.Contains(err.Error(), "1 of 3 nodes answered, a majority (2) is needed") {
		t.Errorf("error does not say what is wrong: %v", err)
	}
	if l, err := c.Mutex("k").Lock(ctx); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Lock with two of three nodes down = %v, %v; want ErrUnavailable", l, err)
	}
	// No partial lock is left on the surviving node.
	rdb := redis.NewClient(&redis.Options{Addr: nodes[1].Addr})
	defer rdb.Close()
	keys, err := rdb.Keys(ctx, "dlock:*:lock").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("lock keys left on the surviving node: %v, %v", keys, err)
	}
}

func TestTokensIncreaseAcrossOneNodeRestartedEmpty(t *testing.T) {
	nodes := startNodes(t, 3)
	c := open(t, nodes)
	last := lockUnlock(t, c, "k")
	for i := range nodes {
		nodes[i].Restart() // without persistence: the node comes back empty
		tok := lockUnlock(t, c, "k")
		if tok <= last {
			t.Fatalf("after node %d restarted empty: token %d, want > %d", i, tok, last)
		}
		last = tok
	}
}

// Documents the limit: when a majority of nodes has lost its counters,
// tokens start again.
func TestTokensRestartWhenMajorityLosesCounters(t *testing.T) {
	nodes := startNodes(t, 3)
	c := open(t, nodes)
	var last uint64
	for range 3 {
		last = lockUnlock(t, c, "k")
	}
	nodes[0].Restart()
	nodes[1].Restart()
	nodes[2].Kill()
	if tok := lockUnlock(t, c, "k"); tok != 1 {
		t.Errorf("token %d after a majority restarted empty (last %d); the package documents that it restarts at 1", tok, last)
	}
}

func TestGrantDeadlineAllowsForDrift(t *testing.T) {
	nodes := startNodes(t, 3)
	c := open(t, nodes)
	ctx := context.Background()
	ttl := 10 * time.Second
	before := time.Now()
	l, err := c.Mutex("k", dlock.WithTTL(ttl)).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if limit := before.Add(ttl - redlock.Drift(ttl)); l.Expires().After(limit) {
		t.Errorf("lease deadline %v after start+TTL-drift %v", l.Expires(), limit)
	}
}
