package temporallock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

type lockResult struct {
	l   *dlock.Lease
	err error
}

// lockAsync starts m.Lock in the background.
func lockAsync(ctx context.Context, m *dlock.Mutex) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		l, err := m.Lock(ctx)
		ch <- lockResult{l, err}
	}()
	return ch
}

// waitWaiters waits until Inspect shows n waiters on name.
func waitWaiters(t *testing.T, c *dlock.Client, name string, n int) dlock.Info {
	t.Helper()
	var in dlock.Info
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("%d waiters on %q", n, name), func() error {
		var err error
		in, err = c.Inspect(testenv.Context(t, 30*time.Second), name)
		if err == nil && len(in.Waiters) != n {
			err = fmt.Errorf("%+v", in)
		}
		return err
	})
	return in
}

func recv(t *testing.T, ch <-chan lockResult, what string) *dlock.Lease {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: Lock: %v", what, r.err)
		}
		return r.l
	case <-time.After(90 * time.Second):
		t.Fatalf("%s: Lock did not return within 90s", what)
	}
	return nil
}

// testWorkerKilled: the only worker of the lock workflows dies (its
// connections cut and frozen) while a lock is held and waited for. The
// holder, which can no longer renew, sees its lease lost; once a new worker
// runs, the waiter is granted the lock with a higher token and the old
// holder's renewals are refused.
func testWorkerKilled(t *testing.T, srv server) {
	const queue = "dlock-test-worker-killed"
	proxy := testenv.NewProxy(t, srv.Addr)
	wc, err := client.DialContext(testenv.Context(t, 30*time.Second), client.Options{HostPort: proxy.Addr(), Namespace: srv.Namespace, Logger: sdkLogger(slog.Default())})
	if err != nil {
		t.Fatal(err)
	}
	w1 := worker.New(wc, queue, worker.Options{LocalActivityWorkerOnly: true, StickyScheduleToStartTimeout: time.Second})
	RegisterWorkflows(w1)
	if err := w1.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Unblock(); w1.Stop(); wc.Close() })

	a := srv.client(t, WithTaskQueue(queue), WithoutWorker())
	b := srv.client(t, WithTaskQueue(queue), WithoutWorker())
	name := "worker-killed/" + t.Name()
	la, err := a.Mutex(name).Lock(testenv.Context(t, 60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	bch := lockAsync(testenv.Context(t, 120*time.Second), b.Mutex(name))
	waitWaiters(t, a, name, 1)

	proxy.Block()
	proxy.Cut()
	select {
	case <-la.Done():
	case <-time.After(3 * testTTL):
		t.Fatal("the holder did not see its lease lost with no worker to renew it")
	}
	if !errors.Is(la.Err(), dlock.ErrLeaseLost) {
		t.Errorf("holder's Err = %v, want ErrLeaseLost", la.Err())
	}
	select {
	case r := <-bch:
		t.Fatalf("the waiter got the lock (%v, %v) while no worker ran", r.l, r.err)
	default:
	}

	w2 := worker.New(a.Driver().(*Driver).c, queue, worker.Options{LocalActivityWorkerOnly: true})
	RegisterWorkflows(w2)
	if err := w2.Start(); err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	lb := recv(t, bch, "waiter")
	if lb.Token() <= la.Token() {
		t.Errorf("waiter's token %d, want > %d", lb.Token(), la.Token())
	}
	if err := la.Unlock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("old holder's Unlock: got %v, want ErrLeaseLost", err)
	}
	if err := lb.Unlock(testenv.Context(t, 30*time.Second)); err != nil {
		t.Errorf("waiter's Unlock: %v", err)
	}
}

// testServerRestart: the Temporal server is killed and restarted while a
// lock is held and two clients wait for it. Holder, token and queue order
// survive, and the lock then goes to the waiters in their order.
func testServerRestart(t *testing.T, srv server) {
	const ttl = 15 * time.Second // outlasts the restart, so the holder keeps its lease
	open := func() *dlock.Client { return dlock.New(srv.open(t, ""), dlock.WithTTL(ttl)) }
	a, b, c := open(), open(), open()
	name := "server-restart/" + t.Name()
	la, err := a.Mutex(name).Lock(testenv.Context(t, 60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	bch := lockAsync(testenv.Context(t, 180*time.Second), b.Mutex(name, dlock.WithNote("B")))
	waitWaiters(t, a, name, 1)
	cch := lockAsync(testenv.Context(t, 180*time.Second), c.Mutex(name, dlock.WithNote("C")))
	waitWaiters(t, a, name, 2)

	srv.Restart(t)
	waitReady(t, srv)

	in := waitWaiters(t, a, name, 2)
	if !in.Held || in.Token != la.Token() {
		t.Fatalf("after restart: held=%v token=%d, want held with token %d", in.Held, in.Token, la.Token())
	}
	if in.Waiters[0].Note != "B" || in.Waiters[1].Note != "C" {
		t.Fatalf("after restart: waiters %q, %q; want B, C", in.Waiters[0].Note, in.Waiters[1].Note)
	}
	select {
	case <-la.Done():
		t.Fatalf("the holder lost its lease over the restart: %v", la.Err())
	default:
	}
	if err := la.Unlock(testenv.Context(t, 60*time.Second)); err != nil {
		t.Fatalf("holder's Unlock after restart: %v", err)
	}
	lb := recv(t, bch, "B")
	select {
	case r := <-cch:
		t.Fatalf("C was granted (%v) while B held the lock", r.err)
	default:
	}
	if lb.Token() <= la.Token() {
		t.Errorf("B's token %d, want > %d", lb.Token(), la.Token())
	}
	if err := lb.Unlock(testenv.Context(t, 60*time.Second)); err != nil {
		t.Fatal(err)
	}
	lc := recv(t, cch, "C")
	if lc.Token() <= lb.Token() {
		t.Errorf("C's token %d, want > %d", lc.Token(), lb.Token())
	}
	if err := lc.Unlock(testenv.Context(t, 60*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// testStopsRenewing: a holder that stops renewing (a driver-level grant
// nobody extends) loses the lock at the end of its TTL, by the lock
// workflow's timer: a waiter gets it with a higher token, and the old
// holder's renewal and release are refused.
func testStopsRenewing(t *testing.T, srv server, mode Mode) {
	d := srv.open(t, "", WithMode(mode))
	name := "stops-renewing/" + t.Name()
	req := driver.Request{Name: name, Owner: "0123456789abcdef0123456789abcdef", TTL: testTTL}
	g, err := d.Acquire(testenv.Context(t, 60*time.Second), req)
	if err != nil {
		t.Fatal(err)
	}
	waiter := dlock.New(srv.open(t, "", WithMode(mode)), dlock.WithTTL(testTTL))
	lw, err := waiter.Mutex(name).Lock(testenv.Context(t, 4*testTTL+60*time.Second))
	if err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if lw.Token() <= g.Token {
		t.Errorf("waiter's token %d, want > %d", lw.Token(), g.Token)
	}
	held := driver.Held{Name: name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}
	if err := d.Extend(testenv.Context(t, 30*time.Second), held, testTTL); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Extend after expiry: got %v, want ErrLeaseLost", err)
	}
	if err := d.Release(testenv.Context(t, 30*time.Second), held); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Release after expiry: got %v, want ErrLeaseLost", err)
	}
	if err := lw.Unlock(testenv.Context(t, 30*time.Second)); err != nil {
		t.Errorf("waiter's Unlock: %v", err)
	}
}

// testIDContinueAsNew: an id-mode lease renewed often enough that its run
// continues as new stays held with the same token, and is renewed and
// released through the new run; a later holder's chain is out of the old
// owner's reach.
func testIDContinueAsNew(t *testing.T, srv server) {
	d := srv.open(t, "", WithMode(ModeID), withHistoryLimit(20))
	ctx := testenv.Context(t, 120*time.Second)
	name := "id-continue-as-new/" + t.Name()
	g, err := d.Acquire(ctx, driver.Request{Name: name, Owner: "a", TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	first := g.Handle.(string)
	held := driver.Held{Name: name, Owner: "a", Token: g.Token, Handle: g.Handle}
	for i := 0; ; i++ {
		desc, err := d.describe(ctx, WorkflowID(ModeID, name), "")
		if err != nil {
			t.Fatal(err)
		}
		if desc.GetWorkflowExecutionInfo().GetExecution().GetRunId() != first {
			break // continued as new
		}
		if i == 50 {
			t.Fatal("the lock run did not continue as new after 50 renewals (history limit 20)")
		}
		if err := d.Extend(ctx, held, testTTL); err != nil {
			t.Fatalf("Extend %d: %v", i, err)
		}
	}
	if err := d.Extend(ctx, held, testTTL); err != nil {
		t.Fatalf("Extend after continue-as-new: %v", err)
	}
	in, err := d.Inspect(ctx, name)
	if err != nil || !in.Held || in.Token != g.Token {
		t.Fatalf("Inspect after continue-as-new: %+v, %v; want held with token %d", in, err, g.Token)
	}
	if err := d.Release(ctx, held); err != nil {
		t.Fatalf("Release after continue-as-new: %v", err)
	}
	g2, err := d.Acquire(ctx, driver.Request{Name: name, Owner: "b", TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	if g2.Token <= g.Token {
		t.Errorf("next token %d, want > %d", g2.Token, g.Token)
	}
	if err := d.Extend(ctx, held, testTTL); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("old owner's Extend against the new holder: got %v, want ErrLeaseLost", err)
	}
	if err := d.Release(ctx, held); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("old owner's Release against the new holder: got %v, want ErrLeaseLost", err)
	}
	if err := d.Release(ctx, driver.Held{Name: name, Owner: "b", Token: g2.Token, Handle: g2.Handle}); err != nil {
		t.Errorf("new holder's Release: %v", err)
	}
}

// testManyWaiters: more clients wait on one name than the server admits
// updates in flight on one workflow (history.maxInFlightUpdates, 10 by
// default, which the test server keeps, as Temporal Cloud does). Every
// waiter is served, in arrival order, and none fails.
func testManyWaiters(t *testing.T, srv server) {
	const waiters = 24
	name := "many-waiters/" + t.Name()
	ctx := testenv.Context(t, 4*time.Minute)
	// Four clients, as four processes with several waiters each.
	var updates updateCounter
	clients := make([]*dlock.Client, 4)
	for i := range clients {
		clients[i] = dlock.New(srv.openDial(t, "", updates.dialOptions()), dlock.WithTTL(testTTL))
	}
	first, err := clients[0].Mutex(name, dlock.WithFair()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	errs := make(chan error, waiters)
	for i := range waiters {
		go func() {
			l, err := clients[i%len(clients)].Mutex(name, dlock.WithFair()).Lock(ctx)
			if err != nil {
				errs <- fmt.Errorf("waiter %d: Lock: %w", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			if err := l.Unlock(ctx); err != nil {
				errs <- fmt.Errorf("waiter %d: Unlock: %w", i, err)
				return
			}
			errs <- nil
		}()
		// The next waiter arrives once this one is queued, so that the
		// arrival order is known.
		waitWaiters(t, clients[0], name, i+1)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range waiters {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	// The queue stays below the server's limit of updates in flight, and
	// the server aborts none (see queryFrom).
	if n := updates.failed.Load(); n > 0 {
		updates.mu.Lock()
		t.Errorf("%d of %d updates failed (first: %v); want none", n, updates.calls.Load(), updates.first)
		updates.mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	for i, w := range order {
		if w != i {
			t.Fatalf("grants in order %v, want arrival order 0..%d", order, waiters-1)
		}
	}
}

// testManyCancelledWaiters: 12 queued waiters are cancelled at once (a
// pool of workers shutting down). Each leaves the queue before its Lock
// returns, and none of them sends an update to do so (which would take one
// of the workflow's update slots: 12 at once, beside the waits held open,
// are more than the server's limit, and would crowd out the holder's
// release); then the lock goes at once to a newcomer. (A long TTL: this
// many waiters on a loaded machine must not lose the holder its lease.)
func testManyCancelledWaiters(t *testing.T, srv server) {
	const waiters = 12
	name := "many-cancelled/" + t.Name()
	ctx := testenv.Context(t, 4*time.Minute)
	var updates updateCounter
	clients := make([]*dlock.Client, 4)
	for i := range clients {
		clients[i] = dlock.New(srv.openDial(t, "", updates.dialOptions()), dlock.WithTTL(3*testTTL))
	}
	first, err := clients[0].Mutex(name, dlock.WithFair()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, waiters)
	for i := range waiters {
		go func() {
			l, err := clients[i%len(clients)].Mutex(name, dlock.WithFair()).Lock(wctx)
			if err == nil {
				_ = l.Unlock(ctx)
				err = fmt.Errorf("waiter %d was granted the lock", i)
			}
			errs <- err
		}()
		// One at a time: arrivals at the same instant can reach the
		// limit (see the package doc); this test is about leaving.
		waitWaiters(t, clients[0], name, i+1)
	}
	releases := updates.releases.Load()
	cancel()
	for range waiters {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled Lock: %v, want context.Canceled", err)
		}
	}
	if n := updates.releases.Load() - releases; n > 0 {
		t.Errorf("the cancelled waiters sent %d release updates, want none (each takes an update slot)", n)
	}
	in, err := clients[1].Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Waiters) != 0 {
		t.Errorf("after every cancelled Lock returned: %d waiters queued, want none", len(in.Waiters))
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatalf("holder's Unlock: %v", err)
	}
	l, err := clients[2].Mutex(name, dlock.WithFair()).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the holder released: %v (a cancelled waiter was granted it?)", err)
	}
	_ = l.Unlock(ctx)
}

// testBurstOfArrivals: 32 processes ask for one name at the same instant
// (cron jobs on 32 hosts at the top of the minute), three times over, more
// than the server admits updates in flight on one workflow. In the first
// burst the server refuses some of the arrivals, and each refusal aborts
// the updates in flight (see "Many waiters" in the package doc), so it is
// slow; but every Lock is granted, none fails, and no two processes hold
// the lock at once. The replies of the first burst told each process that
// the name is crowded, so in the next bursts most Locks queue by signal
// (queueBySignal), which takes no update slot: the test fails if more than
// a quarter of a later burst's Locks are sent as updates.
func testBurstOfArrivals(t *testing.T, srv server) {
	const processes, bursts = 32, 3
	name := "burst/" + t.Name()
	ctx := testenv.Context(t, 4*time.Minute)
	var updates updateCounter
	clients := burstClients(t, srv, processes, &updates)
	overlaps := 0
	for b := range bursts {
		start := time.Now()
		a0, f0 := updates.acquires.Load(), updates.failed.Load()
		n, errs := burst(ctx, clients, name)
		for _, err := range errs {
			t.Errorf("burst %d: %v", b, err)
		}
		overlaps += n
		acquires := updates.acquires.Load() - a0
		t.Logf("burst %d: %d Locks served in %v; %d acquires sent as updates, %d updates refused or aborted",
			b, processes, time.Since(start).Round(time.Millisecond), acquires, updates.failed.Load()-f0)
		if b > 0 && acquires > processes/4 {
			t.Errorf("burst %d: %d acquires sent as updates; want at most %d: a process the first burst's replies told of a crowded queue queues by signal", b, acquires, processes/4)
		}
	}
	if overlaps > 0 {
		t.Errorf("%d grants while another process held the lock; want none", overlaps)
	}
	t.Logf("%d updates sent, %d refused for the in-flight limit or aborted, and retried", updates.calls.Load(), updates.failed.Load())
}

// burstClients opens n clients on srv, each with a driver and SDK worker
// of its own, as n processes would have, counting their updates.
func burstClients(tb testing.TB, srv server, n int, updates *updateCounter) []*dlock.Client {
	clients := make([]*dlock.Client, n)
	for i := range clients {
		clients[i] = dlock.New(srv.openDial(tb, "", updates.dialOptions()), dlock.WithTTL(testTTL))
	}
	return clients
}

// burst has every client Lock name (fair) at the same instant, hold it
// 1ms and Unlock it. It returns when all are done, with the grants made
// while another client held the lock and the calls that failed.
func burst(ctx context.Context, clients []*dlock.Client, name string) (overlaps int, errs []error) {
	var holders, over atomic.Int32
	done := make(chan error, len(clients))
	var wg sync.WaitGroup
	wg.Add(len(clients))
	for i, c := range clients {
		go func() {
			wg.Done()
			wg.Wait() // all at once
			l, err := c.Mutex(name, dlock.WithFair()).Lock(ctx)
			if err != nil {
				done <- fmt.Errorf("process %d: Lock: %w", i, err)
				return
			}
			if holders.Add(1) != 1 {
				over.Add(1)
			}
			time.Sleep(time.Millisecond)
			holders.Add(-1)
			if err := l.Unlock(ctx); err != nil {
				done <- fmt.Errorf("process %d: Unlock: %w", i, err)
				return
			}
			done <- nil
		}()
	}
	for range clients {
		if err := <-done; err != nil {
			errs = append(errs, err)
		}
	}
	return int(over.Load()), errs
}

// updateCounter counts the updates (and updates-with-start) sent by the
// clients dialled with its dialOptions, and the calls that failed: an
// update refused for the server's in-flight limit, or an update (or the
// poll for its outcome) aborted by the server (see queryFrom). The SDK
// retries both, so Lock does not fail, only waits.
type updateCounter struct {
	calls, failed atomic.Int64
	releases      atomic.Int64 // "release" updates sent
	acquires      atomic.Int64 // "acquire" updates-with-start sent
	mu            sync.Mutex
	first         error
}

func (f *updateCounter) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		switch method {
		case workflowservice.WorkflowService_UpdateWorkflowExecution_FullMethodName,
			workflowservice.WorkflowService_ExecuteMultiOperation_FullMethodName,
			workflowservice.WorkflowService_PollWorkflowExecutionUpdate_FullMethodName:
		default:
			return err
		}
		if method != workflowservice.WorkflowService_PollWorkflowExecutionUpdate_FullMethodName {
			f.calls.Add(1)
		}
		if r, ok := req.(*workflowservice.UpdateWorkflowExecutionRequest); ok && r.GetRequest().GetInput().GetName() == updRelease {
			f.releases.Add(1)
		}
		if method == workflowservice.WorkflowService_ExecuteMultiOperation_FullMethodName {
			f.acquires.Add(1)
		}
		if code := status.Code(err); code == codes.ResourceExhausted || code == codes.Unavailable {
			if f.failed.Add(1) == 1 {
				f.mu.Lock()
				f.first = err
				f.mu.Unlock()
			}
		}
		return err
	})}
}

// crowdedName is a name held by one process, with a second process whose
// replies lately counted a crowded queue on it (contention.note).
type crowdedName struct {
	name            string
	holders, waiter *dlock.Client
	d               *Driver // the waiter's
	updates         updateCounter
	first           *dlock.Lease // the holder's lease
}

func newCrowdedName(t *testing.T, ctx context.Context, srv server, name string) *crowdedName {
	c := &crowdedName{name: name, holders: dlock.New(srv.openDial(t, "", nil), dlock.WithTTL(testTTL))}
	c.d = srv.openDial(t, "", c.updates.dialOptions())
	c.waiter = dlock.New(c.d, dlock.WithTTL(testTTL))
	c.hold(t, ctx)
	return c
}

// hold has the holder take the name, and marks it crowded for the waiter.
func (c *crowdedName) hold(t *testing.T, ctx context.Context) {
	c.d.contended.note(c.name, crowded, false)
	var err error
	if c.first, err = c.holders.Mutex(c.name, dlock.WithFair()).Lock(ctx); err != nil {
		t.Fatal(err)
	}
}

// lock has the waiter Lock the name under ctx in the background, and
// returns once it is queued, with a channel that gets the Lock's outcome.
func (c *crowdedName) lock(t *testing.T, ctx context.Context) <-chan lockResult {
	got := lockAsync(ctx, c.waiter.Mutex(c.name, dlock.WithFair()))
	waitWaiters(t, c.holders, c.name, 1)
	return got
}

// release has the holder release, and checks that the waiter's Lock
// (got) is granted after it, with a higher token.
func (c *crowdedName) release(t *testing.T, ctx context.Context, got <-chan lockResult) {
	t.Helper()
	if err := c.first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("crowded Lock: %v", r.err)
	}
	if r.l.Token() <= c.first.Token() {
		t.Errorf("token %d after the holder's %d; want a higher one", r.l.Token(), c.first.Token())
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// testCrowdedNameQueuesBySignal: a process whose replies lately counted
// many waiters on a name (contention.note) sends its next Lock there as a
// signal, not an update. Such a Lock queues behind the holder, and is
// granted when the holder releases, with a higher token, having sent no
// acquire as an update; and one cancelled while queued leaves the queue,
// so that the lock is free once the holder releases.
func testCrowdedNameQueuesBySignal(t *testing.T, srv server) {
	ctx := testenv.Context(t, 2*time.Minute)
	c := newCrowdedName(t, ctx, srv, "crowded/"+t.Name())
	c.release(t, ctx, c.lock(t, ctx))
	if n := c.updates.acquires.Load(); n != 0 {
		t.Errorf("the crowded Lock sent %d acquires as updates; want none (it queues by signal)", n)
	}

	// Cancelled while queued by signal: it leaves.
	c.hold(t, ctx)
	wctx, cancel := context.WithCancel(ctx)
	got := c.lock(t, wctx)
	cancel()
	if r := <-got; !errors.Is(r.err, context.Canceled) {
		t.Errorf("cancelled crowded Lock: %v, want context.Canceled", r.err)
		if r.err == nil {
			_ = r.l.Unlock(ctx)
		}
	}
	if err := c.first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.holders.Mutex(c.name, dlock.WithFair()).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the holder released: %v (the cancelled waiter was granted it?)", err)
	}
	_ = l.Unlock(ctx)
}

// testCrowdedLockOnOlderWorkflow: a crowded name's Lock (sent as a signal)
// on a mutex workflow of an older version of this package, which ignores
// a client's acquire signal: the waiter finds itself not queued, queues by
// update, and is granted the lock once the holder releases it.
func testCrowdedLockOnOlderWorkflow(t *testing.T, srv server) {
	playOlder.Store(true)
	defer playOlder.Store(false)
	ctx := testenv.Context(t, 2*time.Minute)
	c := newCrowdedName(t, ctx, srv, "crowded-older/"+t.Name())
	got := c.lock(t, ctx) // returns once queued
	if n := c.updates.acquires.Load(); n == 0 {
		t.Errorf("the waiter is queued but sent no acquire update; the older workflow should have ignored its signal")
	}
	c.release(t, ctx, got)
}
