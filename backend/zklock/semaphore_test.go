package zklock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// A waiter for a semaphore is granted when any holder ahead of it
// releases, not only the node just ahead: with three permits held and a
// waiter fourth in the queue, the release of the first holder (two nodes
// ahead of the waiter's predecessor) is the waiter's turn at once.
func testSemaphoreWakesOnAnyReleaseAhead(t *testing.T, open func(testing.TB, string) *Driver) {
	const n = 3
	c, waiter := dlock.New(open(t, "/sem")), dlock.New(open(t, "/sem"))
	var held []*dlock.Lease
	for range n {
		l, err := c.Semaphore("wake", n).Acquire(testenv.Context(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	got := make(chan *dlock.Lease, 1)
	ctx := testenv.Context(t, 30*time.Second)
	go func() {
		l, err := waiter.Semaphore("wake", n).Acquire(ctx)
		if err != nil {
			l = nil
		}
		got <- l
	}()
	waitForWaiters(t, c, "wake", 1)
	if err := held[0].Unlock(testenv.Context(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.Fatal("the waiter's Acquire failed")
		}
		if l.Token() <= held[n-1].Token() {
			t.Errorf("token %d after a grant with %d", l.Token(), held[n-1].Token())
		}
		held = append(held[1:], l)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not granted within 5s of the release of the first of the three permits ahead of it")
	}
	for _, l := range held {
		if err := l.Unlock(testenv.Context(t, 30*time.Second)); err != nil {
			t.Error(err)
		}
	}
}

// Clients that disagree on the limit share one queue, and a node behind a
// waiter never holds: with two permits held by clients of limit 5, a
// client of limit 2 waits, and a client of limit 5 that comes after it is
// not granted ahead of it (it would hold a third permit, and the waiter
// would then be granted with two held, and a lower token than a grant
// before it). When a holder releases, both are granted by that one
// deletion (the waiter's place is then within its limit, and the other's
// within its own, behind a holder), with tokens in queue order.
func testSemaphoreDisagreeingLimitsKeepQueueOrder(t *testing.T, open func(testing.TB, string) *Driver) {
	c := dlock.New(open(t, "/sem"))
	ctx := testenv.Context(t, 60*time.Second)
	var held []*dlock.Lease
	for range 2 {
		l, err := c.Semaphore("mixed", 5).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	type grant struct {
		who string
		l   *dlock.Lease
		err error
	}
	got := make(chan grant, 2)
	acquire := func(who string, c *dlock.Client, n int) {
		l, err := c.Semaphore("mixed", n).Acquire(ctx)
		got <- grant{who, l, err}
	}
	two, five := dlock.New(open(t, "/sem")), dlock.New(open(t, "/sem"))
	go acquire("limit 2", two, 2)
	waitForWaiters(t, c, "mixed", 1)
	if l, err := five.Semaphore("mixed", 5).TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire with limit 5 behind a waiter of limit 2: got %v (lease %v), want ErrNotAcquired", err, l)
	}
	go acquire("limit 5", five, 5)
	waitForWaiters(t, c, "mixed", 2)
	select {
	case g := <-got:
		t.Fatalf("%s granted while two were held and a waiter of limit 2 was first in line", g.who)
	case <-time.After(500 * time.Millisecond):
	}
	if err := held[0].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var order []grant
	for range 2 {
		select {
		case g := <-got:
			order = append(order, g)
		case <-time.After(10 * time.Second):
			t.Fatalf("granted after the release: %d of 2", len(order))
		}
	}
	for _, g := range order {
		if g.err != nil {
			t.Fatalf("%s: %v", g.who, g.err)
		}
	}
	if order[0].who != "limit 2" {
		order[0], order[1] = order[1], order[0]
	}
	if order[0].l.Token() >= order[1].l.Token() {
		t.Errorf("token of limit 2: %d, of limit 5 behind it: %d; want queue order", order[0].l.Token(), order[1].l.Token())
	}
	for _, l := range []*dlock.Lease{held[1], order[0].l, order[1].l} {
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
}

// waitForWaiters waits until Inspect of name shows n waiters.
func waitForWaiters(t *testing.T, c *dlock.Client, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		in, err := c.Inspect(testenv.Context(t, 10*time.Second), name)
		if err != nil {
			t.Fatal(err)
		}
		if len(in.Waiters) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Inspect(%q) = %+v; want %d waiters", name, in, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// In a compat layout a semaphore is refused before any I/O, saying why,
// and Capabilities says so; a semaphore of one permit is still the mutex.
func TestCompatRefusesSemaphores(t *testing.T) {
	for _, layout := range Layouts {
		d := &Driver{compat: layout, closed: make(chan struct{})}
		if d.Capabilities().Semaphore {
			t.Errorf("%s: Capabilities.Semaphore is true", layout)
		}
		_, err := d.Acquire(context.Background(), driver.Request{Name: "/locks/x", Owner: strings.Repeat("a", 32), Limit: 3, Wait: true})
		if !errors.Is(err, driver.ErrUnsupported) || !strings.Contains(err.Error(), "not available in compat layouts") {
			t.Errorf("%s: Acquire with Limit 3: %v; want ErrUnsupported saying semaphores are not available in compat layouts", layout, err)
		}
		_, err = dlock.New(d).Semaphore("/locks/x", 3).TryAcquire(context.Background())
		if !errors.Is(err, dlock.ErrUnsupported) {
			t.Errorf("%s: Semaphore(3).TryAcquire: %v; want ErrUnsupported", layout, err)
		}
	}
	if !(&Driver{}).Capabilities().Semaphore {
		t.Error("dlock's own layout: Capabilities.Semaphore is false")
	}
}
