package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/internal/testenv"
)

// A Break that reaches only a minority of the nodes cannot free a lock
// held on a majority: it must fail with ErrUnavailable naming the nodes it
// could not reach, and the holder keeps its lease. The breaker here sees
// the first node directly and the two others through proxies that are
// then closed, while the holder still reaches all three.
func TestBreakOnMinorityFailsAndHolderKeepsLease(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	holder := open(t, nodes)
	p1, p2 := testenv.NewProxy(t, nodes[1].Addr), testenv.NewProxy(t, nodes[2].Addr)
	breaker := dlock.New(newDriver([]string{nodes[0].Addr, p1.Addr(), p2.Addr()}))
	t.Cleanup(func() { breaker.Close() })

	l, err := holder.Mutex("k", dlock.WithTTL(5*time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	p1.Close()
	p2.Close()

	err = breaker.Break(ctx, "k")
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Break reaching 1 of 3 nodes = %v, want ErrUnavailable", err)
	}
	for _, p := range []*testenv.Proxy{p1, p2} {
		if !strings.Contains(err.Error(), p.Addr()) {
			t.Errorf("the error does not name the unreachable node %s: %v", p.Addr(), err)
		}
	}
	t.Log(err)
	in, err := holder.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !in.Held || in.Token != l.Token() {
		t.Fatalf("after the failed Break: held=%v token=%d, want still held with token %d", in.Held, in.Token, l.Token())
	}
	// The holder's next renewal still succeeds on the majority.
	for e0 := l.Expires(); !l.Expires().After(e0); time.Sleep(20 * time.Millisecond) {
		select {
		case <-l.Done():
			t.Fatalf("the holder's lease ended after a Break on a minority: %v", l.Err())
		case <-ctx.Done():
			t.Fatal("the holder's lease was not renewed")
		default:
		}
	}
}

// Break with a majority reachable frees the lock even when a node is down.
func TestBreakWithOneNodeDownFreesTheLock(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	c := open(t, nodes)
	l, err := c.Mutex("k", dlock.WithTTL(time.Minute)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nodes[2].Kill()
	if err := c.Break(ctx, "k"); err != nil {
		t.Fatalf("Break with 2 of 3 nodes up: %v", err)
	}
	next, err := c.Mutex("k").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after Break: %v", err)
	}
	if next.Token() <= l.Token() {
		t.Errorf("token %d after Break, want > %d", next.Token(), l.Token())
	}
	_ = next.Unlock(ctx)
}

// A grant raises the fence counter on every node that answers, also on a
// node whose lock is someone else's (here a stale lock that a release did
// not reach), so that the latest counter is on as many nodes as can be
// reached.
func TestGrantRaisesCounterOnRefusingNode(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	c := open(t, nodes)
	before := lockUnlock(t, c, "k")

	// A holds the lock; its release does not reach n0, which keeps A's
	// lock (TTL 1m).
	p0 := testenv.NewProxy(t, nodes[0].Addr)
	a := dlock.New(newDriver([]string{p0.Addr(), nodes[1].Addr, nodes[2].Addr}))
	t.Cleanup(func() { a.Close() })
	la, err := a.Mutex("k", dlock.WithTTL(time.Minute)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p0.Close()
	if err := la.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with one node unreachable: %v", err)
	}
	// B's grant: n0 refuses (A's stale lock), n1 and n2 grant.
	tb := lockUnlock(t, c, "k")
	if tb <= la.Token() || la.Token() <= before {
		t.Fatalf("tokens %d, %d, %d: want increasing", before, la.Token(), tb)
	}
	if got := fenceCounter(t, ctx, nodes[0].Addr, "k"); got != tb {
		t.Errorf("fence counter of k on the refusing node: %d, want %d", got, tb)
	}
}

// fenceCounter reads the fence counter of lock name on the node at addr.
func fenceCounter(t *testing.T, ctx context.Context, addr, name string) uint64 {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	n, err := rdb.Get(ctx, redisscript.KeysFor("dlock", name).Fence).Uint64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("read the fence counter of %q on %s: %v", name, addr, err)
	}
	return n
}

// The sequence of issue 17 item 4: n0 is cut off, a grant on {n1, n2}
// gets token t; n2 restarts empty; n1 goes down. The nodes that answer,
// {n0, n2}, have not both seen t (n0 missed it, n2 forgot it): without
// fence states the grant on them read t-1 and 0 and issued t again. Now
// n2 does not count until re-seeded, so that grant is refused, and once
// n1 is back (with its data: AOF) the tokens go on increasing.
func TestNoTokenRepeatAfterPartitionThenEmptyRestart(t *testing.T) {
	nodes := []*testenv.Redis{testenv.StartRedis(t), testenv.StartRedis(t, testenv.RedisAOF()), testenv.StartRedis(t)}
	ctx := testenv.Context(t, time.Minute)
	c := open(t, nodes)
	var last uint64
	for range 3 {
		last = lockUnlock(t, c, "k")
	}
	p0 := testenv.NewProxy(t, nodes[0].Addr)
	cutOff := dlock.New(newDriver([]string{p0.Addr(), nodes[1].Addr, nodes[2].Addr}))
	t.Cleanup(func() { cutOff.Close() })
	p0.Close()
	tok := lockUnlock(t, cutOff, "k")
	if tok <= last {
		t.Fatalf("grant on {n1, n2}: token %d, want > %d", tok, last)
	}
	nodes[2].Restart()
	nodes[1].Kill()

	l, err := c.Mutex("k", dlock.WithTTL(2*time.Second)).TryLock(ctx)
	if err == nil {
		_ = l.Unlock(ctx)
		t.Fatalf("grant on {n0, n2 restarted empty} after token %d: token %d", tok, l.Token())
	}
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "only 1 holds its fence counters") ||
		!strings.Contains(err.Error(), nodes[2].Addr+" has no fence state: restarted empty") {
		t.Fatalf("TryLock on {n0, n2 restarted empty} = %v; want ErrUnavailable naming %s, restarted empty", err, nodes[2].Addr)
	}
	t.Log(err)

	nodes[1].Start()
	if next := lockUnlock(t, c, "k"); next <= tok {
		t.Fatalf("grant with n1 back: token %d, want > %d", next, tok)
	}
}

// The double fault with only one node of complete counters reachable: n0
// is cut off while lock b is granted on {n1, n2}; n2 restarts empty; then
// the client reaches n0 and n2 only. It must refuse (ErrUnavailable
// naming n2), not issue b's token again. Once the partition heals, a grant
// re-seeds n2 from n0 and n1: n2 learns b's counter from n1, and with n1
// cut off in turn, b's next token on {n0, n2} is higher.
func TestDoubleFaultRefusesThenRecoversHigher(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	ps := []*testenv.Proxy{testenv.NewProxy(t, nodes[0].Addr), testenv.NewProxy(t, nodes[1].Addr), testenv.NewProxy(t, nodes[2].Addr)}
	c := dlock.New(newDriverWithDeadlines([]string{ps[0].Addr(), ps[1].Addr(), ps[2].Addr()}))
	t.Cleanup(func() { c.Close() })
	lockUnlock(t, c, "k")
	lockUnlock(t, c, "b")

	// A partition: Block holds back what is sent; heal drops it (the
	// client gave up on it) and lets traffic through again.
	heal := func(p *testenv.Proxy) { p.Cut(); p.Unblock() }
	ps[0].Block()
	tb := lockUnlock(t, c, "b")
	nodes[2].Restart()
	ps[1].Block()
	heal(ps[0])
	l, err := c.Mutex("b", dlock.WithTTL(2*time.Second)).TryLock(ctx)
	if err == nil {
		_ = l.Unlock(ctx)
		t.Fatalf("grant of b on {n0, n2 restarted empty} after token %d: token %d", tb, l.Token())
	}
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "2 of 3 nodes reachable but only 1 holds its fence counters") ||
		!strings.Contains(err.Error(), ps[2].Addr()+" has no fence state: restarted empty") {
		t.Fatalf("TryLock on {n0, n2 restarted empty} = %v; want ErrUnavailable naming %s, restarted empty", err, ps[2].Addr())
	}
	t.Log(err)

	heal(ps[1])
	tk := lockUnlock(t, c, "k") // sees n2 without counters, and re-seeds it
	waitSeeded(t, nodes[2].Addr)
	if got := fenceCounter(t, ctx, nodes[2].Addr, "b"); got < tb {
		t.Errorf("re-seeded n2's counter of b: %d, want >= %d", got, tb)
	}
	ps[1].Block()
	if next := lockUnlock(t, c, "b"); next <= tb {
		t.Errorf("grant of b on {n0, n2 re-seeded}: token %d, want > %d", next, tb)
	}
	if next := lockUnlock(t, c, "k"); next <= tk {
		t.Errorf("grant of k on {n0, n2 re-seeded}: token %d, want > %d", next, tk)
	}
}

// Open refuses nodes whose maxmemory-policy may evict held locks, unless
// the URL accepts it with allow_eviction=true.
func TestOpenRefusesEvictingNode(t *testing.T) {
	nodes := []*testenv.Redis{testenv.StartRedis(t), testenv.StartRedis(t, testenv.RedisArgs("--maxmemory-policy", "volatile-lru")), testenv.StartRedis(t)}
	ctx := testenv.Context(t, time.Minute)
	u := "redlock://" + strings.Join(addrs(nodes), ",")
	c, err := dlock.Open(ctx, u)
	if err == nil {
		c.Close()
		t.Fatal("Open with a volatile-lru node succeeded")
	}
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), nodes[1].Addr) || !strings.Contains(err.Error(), "CONFIG SET maxmemory-policy noeviction") {
		t.Errorf("Open with a volatile-lru node = %v; want ErrInvalidOption naming the node and the CONFIG SET to run", err)
	}
	c, err = dlock.Open(ctx, u+"?allow_eviction=true")
	if err != nil {
		t.Fatalf("Open with allow_eviction=true: %v", err)
	}
	c.Close()
}

// TestOpenBoundsEachNodeCall: a client built by Open bounds each node call
// by the driver's per-call timeout, so a node that stops answering (its
// proxy swallows every byte) costs that timeout, not go-redis's 3 s read
// timeout. With a 2 s TTL, a grant whose round 1 waited 3 s on the silent
// node would have no validity left: every Lock would fail. With the bound,
// the two live nodes grant it, and renewal keeps it.
func TestOpenBoundsEachNodeCall(t *testing.T) {
	nodes := startNodes(t, 3)
	p0 := testenv.NewProxy(t, nodes[0].Addr)
	u := "redlock://" + strings.Join([]string{p0.Addr(), nodes[1].Addr, nodes[2].Addr}, ",")
	ctx := testenv.Context(t, 60*time.Second)
	c, err := dlock.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	lockUnlock(t, c, "bounded") // a first use seeds every node's fence state
	p0.Block()
	const ttl = 2 * time.Second
	l, err := c.Mutex("bounded", dlock.WithTTL(ttl)).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock with one silent node of three, TTL %v: %v", ttl, err)
	}
	select {
	case <-l.Done():
		t.Fatalf("lease lost while two of three nodes answer: %v", l.Err())
	case <-time.After(2 * ttl):
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
