package pglock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/pglock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// Waiters of these tests renew their places every 20s (a waiter TTL of a
// minute), so whatever they are granted within a few seconds they were
// woken for, not found on a heartbeat.
const rwWoken = 5 * time.Second

// lockAsync starts a lock call and returns where its lease (or error)
// arrives.
func lockAsync(ctx context.Context, lock func(context.Context) (*dlock.Lease, error)) <-chan *dlock.Lease {
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, _ := lock(ctx)
		got <- l
	}()
	return got
}

func within(t *testing.T, got <-chan *dlock.Lease, d time.Duration, what string) *dlock.Lease {
	t.Helper()
	select {
	case l := <-got:
		if l == nil {
			t.Fatalf("%s: not granted", what)
		}
		return l
	case <-time.After(d):
		t.Fatalf("%s: not granted within %v", what, d)
	}
	return nil
}

func notYet(t *testing.T, got <-chan *dlock.Lease, what string) {
	t.Helper()
	select {
	case l := <-got:
		t.Fatalf("%s was granted (lease %v), want it to wait", what, l)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestRWWriterReleaseWakesTheReadersQueuedBehindIt: the package doc's "a
// release never hands the lease to a reader at the head of the queue: it
// frees the lock and the table's channel wakes the waiters; the readers
// up to the first writer are granted together, the writer behind them
// once they release". Tokens follow the grants: readers above the first
// writer, the second writer above both readers.
func TestRWWriterReleaseWakesTheReadersQueuedBehindIt(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	const name = "rw/wake"
	client := func() *dlock.Client {
		return dlock.New(newDriver(t, srv.URL(srv.Addr, ""), pglock.WithWaiterTTL(time.Minute)))
	}
	admin := client()
	w1, err := admin.RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r1 := lockAsync(ctx, client().RWMutex(name).RLock)
	waitersShown(t, admin, name, 1)
	r2 := lockAsync(ctx, client().RWMutex(name).RLock)
	waitersShown(t, admin, name, 2)
	w2 := lockAsync(ctx, client().RWMutex(name).Lock)
	waitersShown(t, admin, name, 3)

	if err := w1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l1 := within(t, r1, rwWoken, "the first reader after the writer's release")
	l2 := within(t, r2, rwWoken, "the second reader after the writer's release")
	notYet(t, w2, "the second writer while readers hold")
	in, err := admin.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Permits) != 2 || len(in.Waiters) != 1 {
		t.Errorf("Inspect = %d readers, %d waiters; want 2 and 1", len(in.Permits), len(in.Waiters))
	}
	for _, l := range []*dlock.Lease{l1, l2} {
		if l.Token() <= w1.Token() {
			t.Errorf("a reader's token %d, want above the writer's %d", l.Token(), w1.Token())
		}
	}
	if err := l1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	notYet(t, w2, "the second writer while a reader holds")
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lw := within(t, w2, rwWoken, "the second writer after the readers' releases")
	if lw.Token() <= max(l1.Token(), l2.Token()) {
		t.Errorf("the second writer's token %d, want above the readers' %d and %d", lw.Token(), l1.Token(), l2.Token())
	}
	if err := lw.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRWCancelledWriterWakesTheReaderBehindIt: a writer that gives up
// while readers hold leaves the queue and wakes the readers it held back
// ("a waiter that gives up wakes the waiters while permits are held").
func TestRWCancelledWriterWakesTheReaderBehindIt(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	const name = "rw/cancelled-writer"
	client := func() *dlock.Client {
		return dlock.New(newDriver(t, srv.URL(srv.Addr, ""), pglock.WithWaiterTTL(time.Minute)))
	}
	admin := client()
	r, err := admin.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	w := lockAsync(wctx, client().RWMutex(name).Lock)
	waitersShown(t, admin, name, 1)
	late := lockAsync(ctx, client().RWMutex(name).RLock)
	waitersShown(t, admin, name, 2)
	notYet(t, late, "a reader behind a waiting writer")
	cancel()
	if l := <-w; l != nil {
		t.Fatalf("the cancelled writer was granted: %v", l)
	}
	l := within(t, late, rwWoken, "the reader behind the writer that gave up")
	for _, l := range []*dlock.Lease{l, r} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRWCancelledReaderLeavesNothingBehind: a reader that gives up while a
// writer holds leaves the queue before RLock returns, and once the writer
// releases, nothing of it holds the lock.
func TestRWCancelledReaderLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	const name = "rw/cancelled-reader"
	admin := newClient(t, srv.URL(srv.Addr, ""))
	w, err := admin.RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := dlock.New(newDriver(t, srv.URL(srv.Addr, ""), pglock.WithWaiterTTL(time.Minute))).RWMutex(name).RLock(rctx)
		done <- err
	}()
	waitersShown(t, admin, name, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled RLock: %v, want context.Canceled", err)
	}
	if in, err := admin.Inspect(ctx, name); err != nil || len(in.Waiters) != 0 {
		t.Errorf("Inspect after the cancelled RLock = %+v, %v; want no waiters", in, err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if in, err := admin.Inspect(ctx, name); err != nil || in.Held {
		t.Errorf("Inspect after the writer's release = %+v, %v; want free", in, err)
	}
}

// TestRWBreakFreesEveryReader: Break of a lock held by readers ends every
// reader's lease (their renewals and releases fail with ErrLeaseLost), and
// the writer that waited is granted with a token above theirs.
func TestRWBreakFreesEveryReader(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	const name = "rw/break"
	admin := dlock.New(newDriver(t, srv.URL(srv.Addr, ""), pglock.WithWaiterTTL(time.Minute)))
	var readers []*dlock.Lease
	for range 2 {
		r, err := newClient(t, srv.URL(srv.Addr, "")).RWMutex(name).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	w := lockAsync(ctx, dlock.New(newDriver(t, srv.URL(srv.Addr, ""), pglock.WithWaiterTTL(time.Minute))).RWMutex(name).Lock)
	waitersShown(t, admin, name, 1)
	if err := admin.Break(ctx, name); err != nil {
		t.Fatal(err)
	}
	lw := within(t, w, rwWoken, "the writer after Break")
	for _, r := range readers {
		if err := r.Unlock(ctx); !errors.Is(err, dlock.ErrLeaseLost) {
			t.Errorf("Unlock of a broken reader: %v, want ErrLeaseLost", err)
		}
		if lw.Token() <= r.Token() {
			t.Errorf("the writer's token %d, want above the broken reader's %d", lw.Token(), r.Token())
		}
	}
	if err := lw.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The next reader clears the broken readers' permits, and does not
	// report a takeover: their leases excluded no reader.
	d := newDriver(t, srv.URL(srv.Addr, ""))
	req := driver.Request{Name: name, Owner: driver.NewNonce(), TTL: 10 * time.Second, Fair: true, Shared: true,
		Holder: []byte(`{"shared":true}`)}
	g, err := d.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if g.Recovered || g.Token <= lw.Token() {
		t.Errorf("the reader after the broken ones: %+v; want Recovered false and a token above the writer's %d", g, lw.Token())
	}
	if err := d.Release(ctx, driver.Held{Name: name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}); err != nil {
		t.Fatal(err)
	}
}

// TestRWReaderNeverPassesAWaitingWriter: a reader's request is served from
// the queue even when it does not ask for fair waiting (the portable layer
// always asks; a caller of the driver may not): a TryAcquire of a reader
// while a writer waits is ErrNotAcquired.
func TestRWReaderNeverPassesAWaitingWriter(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	const name = "rw/no-barging"
	admin := newClient(t, srv.URL(srv.Addr, ""))
	r, err := admin.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := lockAsync(ctx, newClient(t, srv.URL(srv.Addr, "")).RWMutex(name).Lock)
	waitersShown(t, admin, name, 1)
	d := newDriver(t, srv.URL(srv.Addr, ""))
	req := driver.Request{Name: name, Owner: driver.NewNonce(), TTL: 10 * time.Second, Shared: true,
		Holder: []byte(`{"shared":true}`)}
	if g, err := d.Acquire(ctx, req); !errors.Is(err, driver.ErrNotAcquired) {
		t.Errorf("a reader's Acquire without Fair or Wait while a writer waits: %+v, %v; want ErrNotAcquired", g, err)
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lw := within(t, w, rwWoken, "the writer after the reader's release")
	if err := lw.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
