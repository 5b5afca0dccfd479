package temporallock

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// testCancelledLockThenExit: a waiter's Lock is cancelled and its process
// goes away right after Lock returns (here: its connection to the server is
// frozen at once, so nothing it sends afterwards arrives, as when "dlock
// run --wait" times out and exits). The
// queue must already be clean when Lock returns: Inspect shows no waiter,
// and when the holder releases, another client gets the lock at once
// rather than after the TTL of a grant nobody will ever see.
func testCancelledLockThenExit(t *testing.T, srv server) {
	name := "cancelled-then-exit/" + t.Name()
	a, la, proxy, cancel, bch := queueBehindHolder(t, srv, name)
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

// recv2 is recv that returns the result, error included.
func recv2(t *testing.T, ch <-chan lockResult, what string) lockResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(90 * time.Second):
		t.Fatalf("%s: Lock did not return within 90s", what)
	}
	return lockResult{}
}

// testTerminatedWorkflowWaiter: a workflow queued for a lock with the
// workflow-side Lock is terminated while it waits. Its entry must leave
// the queue by itself (within a bounded time), not wait there for as long
// as the lock stays held.
func testTerminatedWorkflowWaiter(t *testing.T, srv server) {
	d := srv.open(t, "")
	c := dlock.New(d, dlock.WithTTL(testTTL))
	startCallers(t, d)

	name := "terminated-waiter/" + t.Name()
	ctx := testenv.Context(t, 180*time.Second)
	l, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run, err := d.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: callerQueue}, "lockedWork", name, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitWaiters(t, c, name, 1)
	if err := d.c.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "test: the waiting workflow goes away"); err != nil {
		t.Fatal(err)
	}
	// lockedWork's lease TTL is 10s: its place must go within a few of
	// those, while the client keeps holding (and renewing) the lock.
	waitWaiters(t, c, name, 0) // the terminated workflow's place is gone
	select {
	case <-l.Done():
		t.Fatalf("the holder lost its lease: %v", l.Err())
	default:
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The probe that found the waiter gone replays deterministically.
	hist, err := collectHistory(d.c.GetWorkflowHistory(ctx, WorkflowID(ModeFair, name), "", false, 0))
	if err != nil {
		t.Fatal(err)
	}
	r := worker.NewWorkflowReplayer()
	RegisterWorkflows(r)
	if err := r.ReplayWorkflowHistory(nil, hist); err != nil {
		t.Errorf("replay of the mutex workflow: %v", err)
	}
}

// testPausedHolderProcess: a client process holds a lock with a short
// lease and is then stopped (SIGSTOP) for good. It also ran a worker of
// the lock workflows, which had the mutex workflow cached (sticky) and
// had polls open on the server. A waiter in another process, with a long
// context, must be able to inspect the lock within the CLI's default
// --timeout, and must be granted the lock once the paused holder's lease
// ends, not fail with ErrUnavailable. The delay from the lease's end to
// the grant is logged.
func testPausedHolderProcess(t *testing.T, srv server) {
	const ttl = 2 * time.Second
	name := "paused-holder/" + t.Name()
	cmd, tok := dlocktest.StartHolder(t, srv.url(ModeFair), name, ttl)
	// Let the child's worker settle with the workflow cached and its
	// polls parked on the server, as a holder that has run a while.
	time.Sleep(2 * ttl)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT) })

	c := dlock.New(srv.open(t, ""), dlock.WithTTL(ttl))
	if _, err := c.Inspect(testenv.Context(t, 10*time.Second), name); err != nil {
		t.Errorf("Inspect while the holder process is paused: %v", err)
	}
	l, err := c.Mutex(name).Lock(testenv.Context(t, 60*time.Second))
	if err != nil {
		t.Fatalf("waiter with 60s to wait, holder paused with a %v lease: %v", ttl, err)
	}
	t.Logf("granted %v after the paused holder's lease could have ended at the latest", time.Since(stopped)-ttl)
	if l.Token() <= tok {
		t.Errorf("waiter's token %d, want > %d", l.Token(), tok)
	}
	if err := l.Unlock(testenv.Context(t, 30*time.Second)); err != nil {
		t.Errorf("Unlock: %v", err)
	}
}

// testPausedWorkersDoNotStallInspect: several client processes hold
// locks and are then stopped (SIGSTOP) for good, each leaving its worker's
// polls open on the server: polls that take a query and never answer it.
// Another client must still inspect every one of those locks within 30s
// (the bound of a query without a deadline), however many dead polls the
// queries meet first. The first Inspect after the pause usually answers
// in 2-4s, but once took more than the CLI's default --timeout of 10s in
// a CI run.
func testPausedWorkersDoNotStallInspect(t *testing.T, srv server) {
	const ttl = 30 * time.Second // the locks stay held: Inspect must reach a workflow that runs
	const holders = 3
	var names []string
	var cmds []*exec.Cmd
	for i := range holders {
		name := fmt.Sprintf("paused-workers/%s/%d", t.Name(), i)
		cmd, _ := dlocktest.StartHolder(t, srv.url(ModeFair), name, ttl)
		names = append(names, name)
		cmds = append(cmds, cmd)
	}
	time.Sleep(2 * time.Second) // the holders' polls parked on the server
	for _, cmd := range cmds {
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT) })
	}
	c := dlock.New(srv.open(t, ""), dlock.WithTTL(ttl))
	for _, name := range names {
		start := time.Now()
		in, err := c.Inspect(testenv.Context(t, 30*time.Second), name)
		if err != nil {
			t.Errorf("Inspect %s with %d holder processes paused: %v", name, holders, err)
			continue
		}
		if !in.Held {
			t.Errorf("Inspect %s: no holder, want the paused process", name)
		}
		t.Logf("Inspect %s answered in %v", name, time.Since(start))
	}
}

// testIDAttemptTimeout: in id mode, an attempt that the server does not
// answer (its connection frozen) runs into AcquireByRetry's per-attempt
// deadline while the caller's context is still live: that is an
// unreachable backend, ErrUnavailable, not the caller's deadline.
func testIDAttemptTimeout(t *testing.T, srv server) {
	proxy := testenv.NewProxy(t, srv.Addr)
	d := srv.open(t, proxy.Addr(), WithMode(ModeID), WithoutWorker())
	proxy.Block()
	t.Cleanup(proxy.Unblock)
	ctx := testenv.Context(t, 120*time.Second)
	_, err := d.Acquire(ctx, driver.Request{Name: "id-attempt-timeout/" + t.Name(), Owner: "0123456789abcdef0123456789abcdef", TTL: time.Second, Wait: true})
	if ctx.Err() != nil {
		t.Fatalf("Acquire returned only when the caller's context ended: %v", err)
	}
	if !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Acquire with the server frozen: got %v, want ErrUnavailable", err)
	}
}

// testWaiterOutlivesSlowAnswers: a Lock whose requests get no answer
// because no worker runs the lock workflows, while the server itself
// answers, is a slow answer, not an unreachable backend: the waiter waits
// past the driver's per-call timeout for as long as its context lets it,
// and is granted the lock once a worker comes.
func testWaiterOutlivesSlowAnswers(t *testing.T, srv server) {
	const queue = "dlock-test-no-worker"
	c := srv.client(t, WithTaskQueue(queue), WithoutWorker())
	name := "slow-answers/" + t.Name()
	ch := lockAsync(testenv.Context(t, 120*time.Second), c.Mutex(name))
	// Past callTimeout, with nobody to answer.
	time.Sleep(callTimeout + 5*time.Second)
	select {
	case r := <-ch:
		t.Fatalf("Lock returned (%v, %v) while the server answered and the context lived", r.l, r.err)
	default:
	}
	w := worker.New(c.Driver().(*Driver).c, queue, worker.Options{LocalActivityWorkerOnly: true})
	RegisterWorkflows(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	l := recv(t, ch, "waiter")
	if err := l.Unlock(testenv.Context(t, 30*time.Second)); err != nil {
		t.Errorf("Unlock: %v", err)
	}
}

// testCancelledLockCutOffExpires: a waiter's Lock is cancelled while its
// connection to the server is frozen, so its cleanup cannot reach the
// workflow. Lock still returns (its cleanup is bounded), and the entry it
// left behind expires by itself, as the waiter no longer renews its place:
// the queue empties, and once the holder releases, another client gets
// the lock.
func testCancelledLockCutOffExpires(t *testing.T, srv server) {
	name := "cancelled-cut-off/" + t.Name()
	a, la, proxy, cancel, bch := queueBehindHolder(t, srv, name)
	proxy.Block()
	t.Cleanup(proxy.Unblock)
	cancel()
	if r := recv2(t, bch, "cut-off waiter"); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled Lock: got %v, %v; want context.Canceled", r.l, r.err)
	}
	waitWaiters(t, a, name, 0)
	releaseFreesLock(t, srv, la, name)
}

// queueBehindHolder has a client of srv take name, and queues behind it a
// second client that reaches the server through a proxy the test can
// freeze. It returns the holder's client and lease, the proxy, the cancel
// of the waiter's Lock, and where that Lock's result arrives.
func queueBehindHolder(t *testing.T, srv server, name string) (*dlock.Client, *dlock.Lease, *testenv.Proxy, context.CancelFunc, <-chan lockResult) {
	t.Helper()
	a := srv.client(t)
	la, err := a.Mutex(name).Lock(testenv.Context(t, 60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, srv.Addr)
	b := dlock.New(srv.open(t, proxy.Addr()), dlock.WithTTL(testTTL))
	bctx, cancel := context.WithCancel(testenv.Context(t, 120*time.Second))
	bch := lockAsync(bctx, b.Mutex(name))
	waitWaiters(t, a, name, 1)
	return a, la, proxy, cancel, bch
}

// releaseFreesLock releases the holder's lease la and checks that another
// client gets name at once: it did not go to the waiter that gave up.
func releaseFreesLock(t *testing.T, srv server, la *dlock.Lease, name string) {
	t.Helper()
	if err := la.Unlock(testenv.Context(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	lc, err := srv.client(t).Mutex(name).TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatalf("TryLock after the holder released: %v (the lock went to the waiter that gave up)", err)
	}
	if err := lc.Unlock(testenv.Context(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
}
