package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/pglock"
	"github.com/dlock/dlock/internal/testenv"
)

// waitersShown waits until Inspect of name lists n waiters.
func waitersShown(t *testing.T, c *dlock.Client, name string, n int) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d waiters in Inspect", n), func() error {
		in, err := c.Inspect(testenv.Context(t, 30*time.Second), name)
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		if len(in.Waiters) != n {
			return fmt.Errorf("%d waiters", len(in.Waiters))
		}
		return nil
	})
}

// starvedClient is a client whose pool has one connection, and a function
// that takes that connection away from it until the test ends (or the
// returned function is called): the client can then run no statement, but
// its LISTEN connection, which is its own, still receives. Its waiters
// renew their places only every 20s, so none does while it is starved.
func starvedClient(t *testing.T, srv *testenv.Postgres) (*dlock.Client, func() (giveBack func())) {
	t.Helper()
	pool := newPool(t, srv.URL(srv.Addr, "pool_max_conns=1"))
	d, err := pglock.New(pool, pglock.WithWaiterTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	starve := func() func() {
		conn, err := pool.Acquire(testenv.Context(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		// Given back at the latest when the test ends, before the pool
		// closes: a failed test must not leave the pool waiting for it.
		var once sync.Once
		giveBack := func() { once.Do(conn.Release) }
		t.Cleanup(giveBack)
		return giveBack
	}
	return dlock.New(d, dlock.WithTTL(time.Minute)), starve
}

// TestReleaseHandsTheLockToTheNextWaiter: the package doc's "the release
// hands the lock to the first live waiter in the same transaction, and
// tells it by NOTIFY on its driver's own channel: the waiter holds it
// without a statement of its own; a hand-off sends nothing on the table's
// channel". The waiter's pool has no connection to give when the holder
// releases, yet its Lock returns, with the next token: the release
// granted it. A subscriber of the table's channel hears nothing.
func TestReleaseHandsTheLockToTheNextWaiter(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			var opts []dlock.Option
			if fair {
				opts = append(opts, dlock.WithFair())
			}
			ctx := testenv.Context(t, 60*time.Second)
			name := fmt.Sprintf("handoff/%v", fair)
			holder := newClient(t, srv.URL(srv.Addr, ""))
			l, err := holder.Mutex(name, opts...).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			waiter, starve := starvedClient(t, srv)
			// A client that waits without the queue listens on the
			// table's channel: the hand-off must not wake it.
			bystander, stopBystander, err := newDriver(t, srv.URL(srv.Addr, "")).Subscribe(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			defer stopBystander()
			// The waiter's outcome comes back on a buffered channel, not
			// through t: its Lock may outlive a test that has failed.
			type outcome struct {
				lease *dlock.Lease
				err   error
			}
			got := make(chan outcome, 1)
			go func() {
				lw, err := waiter.Mutex(name, opts...).Lock(ctx)
				got <- outcome{lw, err}
			}()
			waitersShown(t, holder, name, 1)
			giveBack := starve()
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			var lw *dlock.Lease
			select {
			case o := <-got:
				giveBack()
				if o.err != nil {
					t.Fatal(o.err)
				}
				lw = o.lease
			case <-time.After(20 * time.Second):
				giveBack()
				t.Fatal("the waiter, which could run no statement, was not handed the lock at the release")
			}
			select {
			case <-bystander:
				t.Error("the hand-off also notified the table's channel")
			case <-time.After(300 * time.Millisecond):
			}
			if lw.Token() <= l.Token() {
				t.Errorf("handed-off token %d, want above %d", lw.Token(), l.Token())
			}
			if err := lw.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReleasePassesOverWaitersThatAreGone: the package doc's "a release
// passes over a waiter whose place ran out, or whose LISTEN connection is
// gone". Two entries ahead of a live waiter: one whose connection's
// advisory lock nobody holds (its process died), one whose place ran out
// (its waiter stopped renewing it, though its connection lives). The
// release hands the lock to the live waiter behind them.
func TestReleasePassesOverWaitersThatAreGone(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	const name = "gone/ahead"
	holder := newClient(t, srv.URL(srv.Addr, ""))
	l, err := holder.Mutex(name, dlock.WithFair()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	alive, err := pgx.Connect(ctx, srv.URL(srv.Addr, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer alive.Close(context.Background())
	if _, err := alive.Exec(ctx, `SELECT pg_advisory_lock(4711)`); err != nil {
		t.Fatal(err)
	}
	if _, err := alive.Exec(ctx, `INSERT INTO dlock_leases_waiters (name, owner, seq, ttl_us, reply, listen_key, expires_at) VALUES
		($1, 'dead', -2, 60000000, 'nowhere', 4712, clock_timestamp() + interval '1 hour'),
		($1, 'late', -1, 60000000, 'nowhere', 4711, clock_timestamp() - interval '1 second')`, []byte(name)); err != nil {
		t.Fatal(err)
	}
	waiter := dlock.New(newDriver(t, srv.URL(srv.Addr, "")), dlock.WithTTL(time.Minute))
	got := make(chan error, 1)
	go func() {
		lw, err := waiter.Mutex(name, dlock.WithFair()).Lock(ctx)
		if err == nil {
			err = lw.Unlock(ctx)
		}
		got <- err
	}()
	waitersShown(t, holder, name, 1) // the two gone entries are not shown
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		owner := srv.Exec(`SELECT owner FROM dlock_leases WHERE name = 'gone/ahead'::bytea`)
		t.Fatalf("the live waiter was not granted the lock; it went to %q", strings.TrimSpace(owner))
	}
	// The entry whose place ran out was deleted by an attempt of the name.
	if n := strings.TrimSpace(srv.Exec(`SELECT count(*) FROM dlock_leases_waiters WHERE owner = 'late'`)); n != "0" {
		t.Errorf("the entry whose place ran out is still in the table (%s rows)", n)
	}
}

// TestWaiterKeepsItsPlaceWhileItWaits: the package doc's "a waiter renews
// its place every third of the waiter TTL". With a waiter TTL of 300ms,
// two waiters that have waited three times as long are still listed in
// arrival order, and are granted in it.
func TestWaiterKeepsItsPlaceWhileItWaits(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	const name = "kept/place"
	client := func() *dlock.Client {
		return dlock.New(newDriver(t, srv.URL(srv.Addr, ""), pglock.WithWaiterTTL(300*time.Millisecond)),
			dlock.WithTTL(time.Minute), dlock.WithFair())
	}
	holder := client()
	l, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 2)
	for i := range 2 {
		c := client()
		go func() {
			lw, err := c.Mutex(name, dlock.WithNote(fmt.Sprint(i))).Lock(ctx)
			if err != nil {
				t.Error(err)
				order <- -1
				return
			}
			order <- i
			_ = lw.Unlock(ctx)
		}()
		waitersShown(t, holder, name, i+1)
	}
	time.Sleep(time.Second)
	in, err := holder.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Waiters) != 2 || in.Waiters[0].Note != "0" || in.Waiters[1].Note != "1" {
		t.Errorf("after three waiter TTLs, Inspect lists waiters %+v; want both, in arrival order", in.Waiters)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for want := range 2 {
		if got := <-order; got != want {
			t.Errorf("grant %d went to waiter %d", want, got)
		}
	}
}

// TestCancelledWaiterLeavesTheQueueBeforeLockReturns: a waiter whose
// context ends is out of the queue when Lock returns, though its place
// would live for a minute more.
func TestCancelledWaiterLeavesTheQueueBeforeLockReturns(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	const name = "cancelled/waiter"
	holder := newClient(t, srv.URL(srv.Addr, ""))
	l, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiter := dlock.New(newDriver(t, srv.URL(srv.Addr, ""), pglock.WithWaiterTTL(time.Minute)), dlock.WithFair())
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Mutex(name).Lock(wctx)
		done <- err
	}()
	waitersShown(t, holder, name, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v, want context.Canceled", err)
	}
	in, err := holder.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Waiters) != 0 {
		t.Errorf("after the cancelled Lock returned, Inspect lists %d waiters, want 0", len(in.Waiters))
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestFairSemaphoreServesItsQueueFirst: the package doc's "a fair
// semaphore's permit is granted only while the permits held and the
// waiters queued ahead are fewer than its limit". A permit freed while a
// fair waiter is queued (and cannot run a statement yet) is not taken by
// a fair TryAcquire that came later; a plain one takes it.
func TestFairSemaphoreServesItsQueueFirst(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	const name, n = "sem/fair", 2
	holder := newClient(t, srv.URL(srv.Addr, ""))
	a, err := holder.Semaphore(name, n, dlock.WithFair()).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Semaphore(name, n, dlock.WithFair()).Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	waiter, starve := starvedClient(t, srv)
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Semaphore(name, n, dlock.WithFair()).Acquire(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waitersShown(t, holder, name, 1)
	giveBack := starve()
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	late := newClient(t, srv.URL(srv.Addr, ""))
	if l, err := late.Semaphore(name, n, dlock.WithFair()).TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		if l != nil {
			_ = l.Unlock(ctx)
		}
		t.Errorf("fair TryAcquire of a permit freed while a fair waiter is queued: %v, want ErrNotAcquired", err)
	}
	l, err := late.Semaphore(name, n).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("plain TryAcquire of a free permit with a fair waiter queued: %v, want the permit", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	giveBack()
	if err := <-got; err != nil {
		t.Fatalf("the queued waiter: %v", err)
	}
}

// TestSessionLocksRefuseFairWaiting: session locks wait in the server's
// lock queue, which makes no FIFO promise: Capabilities.Fair is false and
// WithFair is ErrUnsupported.
func TestSessionLocksRefuseFairWaiting(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	d := newDriver(t, srv.URL(srv.Addr, ""), pglock.WithSessionLocks())
	if d.Capabilities().Fair {
		t.Error("session locks claim Capabilities.Fair")
	}
	if _, err := dlock.New(d).Mutex("s", dlock.WithFair()).Lock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("Lock WithFair of a session lock: %v, want ErrUnsupported", err)
	}
	if !newDriver(t, srv.URL(srv.Addr, "")).Capabilities().Fair {
		t.Error("lease mode does not claim Capabilities.Fair")
	}
}

// TestFairTryLockDoesNotPassAQueuedWaiter: the package doc's "with
// WithFair nobody passes a live waiter; a plain Lock's first attempt
// takes a free lock whoever waits". The lock is broken while a waiter is
// queued (and cannot run a statement yet): it is free, and no release
// handed it over. A fair TryLock finds it taken by the queue, and a fair
// Lock queues behind the waiter; a plain Lock takes it at once.
func TestFairTryLockDoesNotPassAQueuedWaiter(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	const name = "fair/trylock"
	holder := newClient(t, srv.URL(srv.Addr, ""))
	if _, err := holder.Mutex(name).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	waiter, starve := starvedClient(t, srv)
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Mutex(name, dlock.WithFair()).Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waitersShown(t, holder, name, 1)
	giveBack := starve()
	if err := holder.Break(ctx, name); err != nil {
		t.Fatal(err)
	}
	late := newClient(t, srv.URL(srv.Addr, ""))
	if l, err := late.Mutex(name, dlock.WithFair()).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		if l != nil {
			_ = l.Unlock(ctx)
		}
		t.Errorf("fair TryLock of a free lock with a live waiter queued: %v, want ErrNotAcquired", err)
	}
	behind := make(chan error, 1)
	go func() {
		l, err := newClient(t, srv.URL(srv.Addr, "")).Mutex(name, dlock.WithFair()).Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		behind <- err
	}()
	waitersShown(t, holder, name, 2) // the fair Lock queued: it did not take the free lock
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := late.Mutex(name).Lock(lctx)
	if err != nil {
		t.Fatalf("plain Lock of a free lock with a waiter queued: %v, want the lock at once", err)
	}
	giveBack()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the queued waiter: %v", err)
	}
	if err := <-behind; err != nil {
		t.Fatalf("the fair Lock queued behind it: %v", err)
	}
}
