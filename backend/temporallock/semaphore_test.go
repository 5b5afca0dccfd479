package temporallock

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// permitHolder is the Request.Holder of a permit of a semaphore of n, as
// the portable layer writes it.
func permitHolder(n int) []byte {
	return []byte(`{"note":"permit","limit":` + strconv.Itoa(n) + `}`)
}

// testPermitsAreOwnerChecked: three permits are held; each one's renewal
// and release act on that permit only. A renewal that names one owner
// with another permit's token is refused, the release of the last permit
// leaves the first two, a second release of it and its renewal report the
// loss, and the other permits are untouched throughout.
func testPermitsAreOwnerChecked(t *testing.T, srv server) {
	d := srv.open(t, "")
	ctx := testenv.Context(t, 60*time.Second)
	name := "permits-owner-checked/" + t.Name()
	var held []driver.Held
	for range 3 {
		req := driver.Request{Name: name, Owner: driver.NewNonce(), TTL: testTTL, Holder: permitHolder(3), Limit: 3}
		g, err := d.Acquire(ctx, req)
		if err != nil {
			t.Fatalf("permit %d of 3: %v", len(held)+1, err)
		}
		held = append(held, driver.Held{Name: name, Owner: req.Owner, Token: g.Token})
	}
	a, b, c := held[0], held[1], held[2]
	if err := d.Extend(ctx, driver.Held{Name: name, Owner: a.Owner, Token: b.Token}, testTTL); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("renewal by A's owner with B's token: got %v, want ErrLeaseLost", err)
	}
	if err := d.Release(ctx, c); err != nil {
		t.Fatalf("release of C: %v", err)
	}
	if err := d.Release(ctx, c); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("second release of C: got %v, want ErrLeaseLost", err)
	}
	if err := d.Extend(ctx, c, testTTL); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("renewal of C after its release: got %v, want ErrLeaseLost", err)
	}
	in, err := d.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Permits) != 2 || in.Permits[0].Token != a.Token || in.Permits[1].Token != b.Token {
		t.Fatalf("after C's release: permits %+v, want A's (token %d) and B's (token %d)", in.Permits, a.Token, b.Token)
	}
	for _, h := range []driver.Held{a, b} {
		if err := d.Extend(ctx, h, testTTL); err != nil {
			t.Errorf("renewal of the permit with token %d: %v", h.Token, err)
		}
		if err := d.Release(ctx, h); err != nil {
			t.Errorf("release of the permit with token %d: %v", h.Token, err)
		}
	}
}

// testLaterPermitExpiresAlone: of two permits, the first is renewed and
// the second, granted after it, is not; the second's lease ends at its
// own time, by the workflow's timer, and a waiter is granted it then
// while the first permit is kept. The first permit and the waiter have
// long leases, so that neither a renewal nor a wait comes back to the
// workflow within the test's bound: only the timer set for the second
// permit's end can grant it in time.
func testLaterPermitExpiresAlone(t *testing.T, srv server) {
	const short, long = 2 * time.Second, time.Minute
	d := srv.open(t, "")
	c := dlock.New(d, dlock.WithTTL(long))
	ctx := testenv.Context(t, 60*time.Second)
	name := "later-permit-expires/" + t.Name()
	first, err := c.Semaphore(name, 2).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := driver.Request{Name: name, Owner: driver.NewNonce(), TTL: short, Holder: permitHolder(2), Limit: 2}
	g, err := d.Acquire(ctx, req) // never renewed
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, short+5*time.Second)
	defer cancel()
	l, err := dlock.New(srv.open(t, ""), dlock.WithTTL(long)).Semaphore(name, 2).Acquire(wctx)
	if err != nil {
		t.Fatalf("waiter, after the unrenewed permit's %v lease: %v", short, err)
	}
	if l.Token() <= g.Token {
		t.Errorf("waiter's token %d, want > %d", l.Token(), g.Token)
	}
	if err := d.Extend(ctx, driver.Held{Name: name, Owner: req.Owner, Token: g.Token}, short); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("renewal of the expired permit: got %v, want ErrLeaseLost", err)
	}
	select {
	case <-first.Done():
		t.Errorf("the renewed permit was lost: %v", first.Err())
	default:
	}
	for _, l := range []*dlock.Lease{first, l} {
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
}

// testLeavingWaiterLetsOthersIn: two permits are held under a limit of 5;
// W waits under a limit of 2, and X, behind it, under 5. X waits for W
// (grants go in queue order), but when W gives up, X is granted at once,
// while the two permits are still held.
func testLeavingWaiterLetsOthersIn(t *testing.T, srv server) {
	c := srv.client(t)
	ctx := testenv.Context(t, 60*time.Second)
	name := "leaving-waiter/" + t.Name()
	var held []*dlock.Lease
	for range 2 {
		l, err := c.Semaphore(name, 5).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	wctx, cancelW := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() {
		_, err := srv.client(t).Semaphore(name, 2).Acquire(wctx)
		wdone <- err
	}()
	waitWaiters(t, c, name, 1)
	xdone := make(chan lockResult, 1)
	go func() {
		l, err := srv.client(t).Semaphore(name, 5).Acquire(ctx)
		xdone <- lockResult{l, err}
	}()
	waitWaiters(t, c, name, 2)
	cancelW()
	if err := <-wdone; !errors.Is(err, context.Canceled) {
		t.Fatalf("W: got %v, want context.Canceled", err)
	}
	select {
	case r := <-xdone:
		if r.err != nil {
			t.Fatalf("X: %v", r.err)
		}
		held = append(held, r.l)
	case <-time.After(10 * time.Second):
		in, _ := c.Inspect(ctx, name)
		t.Fatalf("X was not granted within 10s of W leaving, with 2 of its 5 permits held: %+v", in)
	}
	for _, l := range held {
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
}
