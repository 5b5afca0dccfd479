package redlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock"
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
// not reach). Then that node carries the latest counter, and a later
// majority made of it and a node restarted empty still reads it: the token
// increases.
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
	nodes[2].Restart() // empty
	// Break removes A's stale lock from n0.
	if err := c.Break(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	nodes[1].Kill()
	// The next majority is {n0, n2}: n0 refused B's grant, n2 forgot it.
	if next := lockUnlock(t, c, "k"); next <= tb {
		t.Errorf("token %d on {n0, n2 restarted empty} after token %d: the counter was not raised on n0", next, tb)
	}
}

// The limit the package documents: a node that misses a grant (cut off)
// and a node of that grant restarted empty form a majority that has not
// seen the grant's counter, and its token is issued again. This is the
// exact sequence: n0 cut off, a grant on {n1, n2} gets t; n2 restarts
// empty; n0 is back and n1 down: the grant on {n0, n2} reads t-1 and 0.
func TestTokenRepeatsAfterPartitionThenEmptyRestart(t *testing.T) {
	nodes := startNodes(t, 3)
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
	if tok != last+1 {
		t.Fatalf("grant on {n1, n2}: token %d, want %d", tok, last+1)
	}
	nodes[2].Restart()
	nodes[1].Kill()
	if again := lockUnlock(t, c, "k"); again != tok {
		t.Errorf("grant on {n0, n2 restarted empty}: token %d; the package documents that it repeats %d", again, tok)
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
