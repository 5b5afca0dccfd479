package temporallock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/internal/testenv"
)

// testQueuedAcquireIsHeldOpen: three clients queue, one after the other,
// behind a holder. Each learns of its grant from its acquire, which the
// mutex workflow held open (holdVersion): no client sends a "wait". The
// grants go in arrival order, with increasing tokens. The mutex
// workflow's history (with the holdVersion marker) replays, and with
// -update-histories is saved as testdata/mutex-hold.json, which
// TestReplayRecordedHistories replays beside the histories recorded
// before.
func testQueuedAcquireIsHeldOpen(t *testing.T, srv server) {
	const waiters = 3
	name := "held-acquire/" + t.Name()
	ctx := testenv.Context(t, 3*time.Minute)
	a := srv.client(t)
	first, err := a.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var updates updateCounter
	// A TTL long enough that no acquire's wait slice (a third of it)
	// ends before its grant, even on a loaded machine.
	b := dlock.New(srv.openDial(t, "", updates.dialOptions()), dlock.WithTTL(60*time.Second))
	chs := make([]<-chan lockResult, waiters)
	for i := range chs {
		chs[i] = lockAsync(ctx, b.Mutex(name))
		waitWaiters(t, a, name, i+1)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	last := first.Token()
	for i, ch := range chs {
		r := recv2(t, ch, fmt.Sprintf("waiter %d", i))
		if r.err != nil {
			t.Fatalf("waiter %d: %v", i, r.err)
		}
		if r.l.Token() <= last {
			t.Errorf("waiter %d got token %d, want > %d (grants in arrival order)", i, r.l.Token(), last)
		}
		last = r.l.Token()
		if err := r.l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := updates.waits.Load(); n != 0 {
		t.Errorf("the queued waiters sent %d wait updates, want none: each acquire should have been held open until its grant", n)
	}
	hist, err := collectHistory(b.Driver().(*Driver).c.GetWorkflowHistory(ctx, WorkflowID(ModeFair, name), "", false, 0))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if *updateHistories {
		dir = "testdata"
	}
	replay(t, []string{saveHistory(t, dir, "mutex-hold.json", hist)})
}

// testCancelledHeldAcquireLeavesNoWaiter: as testCancelledLockThenExit,
// with a waiter whose acquire is held open for longer than a cancelled
// Lock spends leaving the queue (a TTL of 30s: a wait slice of 10s, and
// leaveBound of 5s). Its release must be sent once the acquire is in the
// workflow, not once the acquire returns, or the Lock gives up leaving and
// returns with its entry still queued.
func testCancelledHeldAcquireLeavesNoWaiter(t *testing.T, srv server) {
	name := "cancelled-held-acquire/" + t.Name()
	a := srv.client(t)
	la, err := a.Mutex(name).Lock(testenv.Context(t, 60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, srv.Addr)
	b := dlock.New(srv.open(t, proxy.Addr()), dlock.WithTTL(30*time.Second))
	bctx, cancel := context.WithCancel(testenv.Context(t, 120*time.Second))
	defer cancel()
	bch := lockAsync(bctx, b.Mutex(name))
	waitWaiters(t, a, name, 1)
	cancel()
	r := recv2(t, bch, "cancelled waiter")
	proxy.Block() // the process exits: nothing more arrives from it
	t.Cleanup(proxy.Unblock)
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled Lock: got %v, %v; want context.Canceled", r.l, r.err)
	}
	in, err := a.Inspect(testenv.Context(t, 30*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Waiters) != 0 {
		t.Fatalf("after the cancelled Lock returned and its process went away: %d waiters queued, want none", len(in.Waiters))
	}
	releaseFreesLock(t, srv, la, name)
}
