package redlock_test

import (
	"context"
	"errors"
	"net/url"
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
	return driverOver(addrs, redis.Options{MaxRetries: -1})
}

// newDriverWithDeadlines is newDriver with clients whose calls end at the
// driver's per-call deadline (ContextTimeoutEnabled), so that a node
// behind a blocked proxy costs that, not go-redis's 3 s read timeout.
func newDriverWithDeadlines(addrs []string) *redlock.Driver {
	return driverOver(addrs, redis.Options{MaxRetries: -1, ContextTimeoutEnabled: true})
}

func driverOver(addrs []string, opt redis.Options) *redlock.Driver {
	var clients []redis.UniversalClient
	for _, a := range addrs {
		o := opt
		o.Addr = a
		clients = append(clients, redis.NewClient(&o))
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

// compat=setnx keeps dlock's contract among dlock's clients; the nodes
// do not announce deletions, so waiters poll as well.
func TestConformanceSetNX(t *testing.T) {
	nodes := startNodes(t, 3)
	h := harness(nodes)
	h.URL += "?compat=setnx"
	h.Open = func(ctx context.Context, proxied []string) (driver.Driver, error) {
		a := addrs(nodes)
		if proxied != nil {
			a = proxied
		}
		u, _ := url.Parse("redlock://" + strings.Join(a, ",") + "?compat=setnx")
		return redlock.Open(ctx, u)
	}
	dlocktest.Run(t, h)
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

// Each node in turn restarts empty; the next grant re-seeds it, and once
// it is re-seeded the next node may restart: the tokens increase
// throughout.
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
		waitSeeded(t, nodes[i].Addr)
	}
}

// When a majority of the nodes has lost its counters, no majority of
// nodes with complete counters answers, and acquiring is refused (rather
// than tokens starting again at 1).
func TestMajorityLosingCountersRefuses(t *testing.T) {
	nodes := startNodes(t, 3)
	c := open(t, nodes)
	for range 3 {
		lockUnlock(t, c, "k")
	}
	nodes[0].Restart()
	nodes[1].Restart()
	nodes[2].Kill()
	ctx := testenv.Context(t, time.Minute)
	l, err := c.Mutex("k").TryLock(ctx)
	if err == nil {
		_ = l.Unlock(ctx)
		t.Fatalf("TryLock after a majority restarted empty granted token %d", l.Token())
	}
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "only 0 holds its fence counters") {
		t.Fatalf("TryLock after a majority restarted empty = %v; want ErrUnavailable saying that no node holds its fence counters", err)
	}
}

// fenceState is the value of a node's fence-state key ("" if none).
func fenceState(t *testing.T, ctx context.Context, addr string) string {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	s, err := rdb.Get(ctx, "dlock:fence-state").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("read the fence state of %s: %v", addr, err)
	}
	return s
}

// setFenceState sets a node's fence-state key to s, or deletes it if s is "".
func setFenceState(t *testing.T, ctx context.Context, addr, s string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	err := rdb.Del(ctx, "dlock:fence-state").Err()
	if err == nil && s != "" {
		err = rdb.Set(ctx, "dlock:fence-state", s, 0).Err()
	}
	if err != nil {
		t.Fatalf("set the fence state of %s: %v", addr, err)
	}
}

// waitSeeded waits until the node at addr holds complete fence counters
// (a grant that saw it without them re-seeds it in the background).
func waitSeeded(t *testing.T, addr string) {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	for fenceState(t, ctx, addr) != "complete" {
		select {
		case <-ctx.Done():
			t.Fatalf("node %s was not re-seeded", addr)
		case <-time.After(10 * time.Millisecond):
		}
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
