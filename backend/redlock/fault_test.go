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
