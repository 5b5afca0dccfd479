package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// Fair waiting (fair.go). The conformance suite runs whole with WithFair
// (ConformanceFair); these tests pin down what it cannot see: queue
// entries of waiters in other processes that crashed or stalled, and
// which waiters a hand-off wakes.

const fairTable = "?table=fair_queue"

// queuedWaiter is a waiter of another process, made with the driver's own
// enqueue statement on a session of its own: its entry is live while the
// session holds its queue lock and its entry's TTL runs.
type queuedWaiter struct {
	conn *sql.Conn
}

func (s server) queuedWaiter(t *testing.T, d *Driver, name string, entryTTL time.Duration) *queuedWaiter {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	c, err := s.sqlDB(t).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { discard(c) })
	owner := driver.NewNonce()
	r, err := c.ExecContext(ctx, d.q.enqueue, []byte(name), owner, []byte(`{"note":"other process"}`), nil,
		micros(10*time.Second), micros(entryTTL), queueLock(owner))
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	if n, _ := r.RowsAffected(); n != 1 {
		t.Fatalf("enqueue wrote %d rows", n)
	}
	return &queuedWaiter{conn: c}
}

// crash ends the waiter's session, as the death of its process does.
func (w *queuedWaiter) crash() { discard(w.conn) }

// waiters is how many live waiters Inspect shows.
func waiters(t *testing.T, c *dlock.Client, name string) int {
	t.Helper()
	in, err := c.Inspect(testenv.Context(t, 30*time.Second), name)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	return len(in.Waiters)
}

func waitForWaiters(t *testing.T, c *dlock.Client, name string, n int) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d live waiters", n), func() error {
		if got := waiters(t, c, name); got != n {
			return fmt.Errorf("%d waiters", got)
		}
		return nil
	})
}

// testFairTryLockDoesNotPassAQueuedWaiter: a free lock with a live waiter
// queued is not taken by a fair TryLock (a plain one may take it); once
// that waiter's session ends, it is.
func (s server) testFairTryLockDoesNotPassAQueuedWaiter(t *testing.T) {
	ctx := testenv.Context(t, 60*time.Second)
	d := s.open(t, s.Addr, fairTable)
	fair := dlock.New(d, dlock.WithFair(), dlock.WithTTL(10*time.Second))
	plain := dlock.New(s.open(t, s.Addr, fairTable), dlock.WithTTL(10*time.Second))
	name := "fair/" + t.Name()
	l, err := fair.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w := s.queuedWaiter(t, d, name, time.Minute)
	waitForWaiters(t, plain, name, 1)
	if l, err := fair.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("fair TryLock of a free lock with a live waiter queued: %v (lease %v); want ErrNotAcquired", err, l)
	}
	lctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if l, err := fair.Mutex(name).Lock(lctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("fair Lock behind a live waiter: %v (lease %v); want to wait", err, l)
	}
	cancel()
	waitForWaiters(t, plain, name, 1) // the cancelled Lock left the queue
	// The plain mode keeps its semantics: an arrival may take a free lock.
	pl, err := plain.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("plain TryLock of a free lock: %v", err)
	}
	if err := pl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w.crash()
	testenv.Eventually(t, 30*time.Second, "a fair TryLock once the waiter's session ended", func() error {
		l, err := fair.Mutex(name).TryLock(ctx)
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	})
}

// testFairQueueSkipsAWaiterThatLeft: the release hands the lock past a
// queued waiter that is no longer live — its session ended (crashed), or
// it stopped renewing its entry (stalled) — to the next live one, which
// gets the very next token: the dead entry was never granted. The live
// waiter, when it leaves the queue, deletes the dead entry.
func (s server) testFairQueueSkipsAWaiterThatLeft(t *testing.T) {
	for _, tc := range []struct {
		name     string
		entryTTL time.Duration
		leave    func(*queuedWaiter)
	}{
		{"Crashed", time.Minute, (*queuedWaiter).crash},
		{"Stalled", 1500 * time.Millisecond, func(*queuedWaiter) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testenv.Context(t, 60*time.Second)
			d := s.open(t, s.Addr, fairTable)
			holder := dlock.New(d, dlock.WithFair(), dlock.WithTTL(10*time.Second))
			wd := s.open(t, s.Addr, fairTable)
			waiter := dlock.New(wd, dlock.WithFair(), dlock.WithTTL(10*time.Second))
			name := "fair/" + t.Name()
			l, err := holder.Mutex(name).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			w := s.queuedWaiter(t, d, name, tc.entryTTL)
			got := make(chan *dlock.Lease, 1)
			go func() {
				lw, err := waiter.Mutex(name).Lock(ctx)
				if err != nil && ctx.Err() == nil {
					t.Errorf("waiter: %v", err)
				}
				got <- lw
			}()
			waitForWaiters(t, holder, name, 2)
			tc.leave(w)
			waitForWaiters(t, holder, name, 1)
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			lw := <-got
			if lw == nil {
				return
			}
			if lw.Token() != l.Token()+1 {
				t.Errorf("the live waiter got token %d after the holder's %d: the lock was handed to the dead entry first", lw.Token(), l.Token())
			}
			if err := lw.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			// The live waiter, leaving the queue, deleted the dead entry
			// with its own.
			testenv.Eventually(t, 10*time.Second, "no entry of "+name+" left in the queue table", func() error {
				var n int
				if err := s.sqlDB(t).QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+queueTable(wd.table)+"` WHERE name = ?", []byte(name)).Scan(&n); err != nil {
					return testenv.Final(err)
				}
				if n != 0 {
					return fmt.Errorf("%d rows", n)
				}
				return nil
			})
		})
	}
}

// testFairReleaseWakesOnlyTheNextWaiter: with three waiters queued, a
// release wakes the first (the holder's bell), and the first's leaving
// the queue wakes the second (its queue lock); the third, waiting on the
// second, is not woken, and no one but the first hears the bell.
func (s server) testFairReleaseWakesOnlyTheNextWaiter(t *testing.T) {
	ctx := testenv.Context(t, 60*time.Second)
	holder := dlock.New(s.open(t, s.Addr, fairTable), dlock.WithFair(), dlock.WithTTL(10*time.Second))
	name := "fair/" + t.Name()
	l, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ds []*Driver
	got := make(chan int, 3)
	for i := range 3 {
		d := s.open(t, s.Addr, fairTable)
		ds = append(ds, d)
		c := dlock.New(d, dlock.WithFair(), dlock.WithTTL(10*time.Second))
		go func() {
			lw, err := c.Mutex(name).Lock(ctx)
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("waiter %d: %v", i, err)
				}
				got <- -1
				return
			}
			got <- i
			<-ctx.Done()
			_ = lw.Unlock(context.Background())
		}()
		waitForWaiters(t, holder, name, i+1)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if first := <-got; first != 0 {
		t.Fatalf("waiter %d was granted first, want 0", first)
	}
	testenv.Eventually(t, 30*time.Second, "the second waiter to hear the first leave", func() error {
		if n := ds[1].fairWaits[waitPredecessorL].Load(); n == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	if n := ds[0].fairWaits[waitHandedOff].Load() + ds[0].fairWaits[waitRangHandedOff].Load(); n != 1 {
		t.Errorf("the first waiter learnt of its hand-off %d times, want 1", n)
	}
	for i, d := range ds[1:] {
		if n := d.fairWaits[waitRang].Load(); n != 0 {
			t.Errorf("waiter %d heard the holder's bell %d times: the release woke more than the next waiter", i+1, n)
		}
	}
	if n := ds[2].fairWaits[waitPredecessorL].Load(); n != 0 {
		t.Errorf("the third waiter was woken %d times by a predecessor leaving, though the second still waits", n)
	}
}

// testFairHandOffDropsTheBellInTheRelease: a release that hands the lock
// to a waiter blocked on the holder's bell is one statement of the
// holder's driver, sent on its bell connection, which drops the bell as
// well: the bell is free once Unlock returns, and the keeper sends nothing
// for it (the old way, a second round trip before the waiter wakes). The
// waiter's statement that the bell woke reports the hand-off itself: one
// statement between the release and the new holder knowing it.
func (s server) testFairHandOffDropsTheBellInTheRelease(t *testing.T) {
	ctx := testenv.Context(t, 60*time.Second)
	db := s.sqlDB(t)
	hd := s.open(t, s.Addr, fairTable)
	holder := dlock.New(hd, dlock.WithFair(), dlock.WithTTL(10*time.Second))
	name := "fair/" + t.Name()
	l, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wd := s.open(t, s.Addr, fairTable)
	waiter := dlock.New(wd, dlock.WithFair(), dlock.WithTTL(10*time.Second))
	got := make(chan *dlock.Lease, 1)
	go func() {
		lw, err := waiter.Mutex(name).Lock(ctx)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- lw
	}()
	waitForWaiters(t, holder, name, 1)
	bell := bellName(hd.table, name)
	usedBy := func() int64 {
		var id sql.NullInt64
		if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", bell).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id.Int64
	}
	testenv.Eventually(t, 30*time.Second, "the holder's bell taken and the waiter blocked on it", func() error {
		if id := usedBy(); id == 0 || uint64(id) != hd.bells.ownID() {
			return fmt.Errorf("bell held by session %d", id)
		}
		if n := waitingSessions(t, db); n != 1 {
			return fmt.Errorf("%d sessions in GET_LOCK", n)
		}
		return nil
	})
	rounds := hd.bells.rounds.Load()
	// Statements the waiter sent before it blocked on the bell (the
	// holder's bell not taken yet, under load) are not after the ring.
	after := func() int64 {
		return wd.fairWaits[waitRang].Load() + wd.fairWaits[waitHandedOff].Load() + wd.fairWaits[waitPending].Load()
	}
	before := after()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if id := usedBy(); id != 0 && uint64(id) == hd.bells.ownID() {
		t.Errorf("the holder's bell connection still holds the bell after Unlock returned")
	}
	lw := <-got
	if lw == nil {
		return
	}
	defer lw.Unlock(ctx)
	if lw.Token() != l.Token()+1 {
		t.Errorf("the waiter got token %d after the holder's %d", lw.Token(), l.Token())
	}
	time.Sleep(100 * time.Millisecond) // a keeper's statement would be sent by now
	if n := hd.bells.rounds.Load() - rounds; n != 0 {
		t.Errorf("the holder's keeper sent %d statements for the hand-off, want 0: the release did not drop the bell", n)
	}
	// The waiter learnt of the hand-off in the statement that the bell
	// woke: no statement of its own after the ring.
	if n := wd.fairWaits[waitRangHandedOff].Load(); n != 1 {
		t.Errorf("the waiter's woken statement found the lock its own %d times, want 1", n)
	}
	if n := after() - before; n != 0 {
		t.Errorf("the waiter sent %d more statements after the ring to learn of the hand-off, want 0", n)
	}
}

// testFairReleaseBeforeTheBellKeepsTheOrder: a fair lease released before
// its bell was taken (granted with nobody else queued, held less than the
// bell's delay, lengthened here) is released by the plain release
// statement, which does not read the queue (no multi-table UPDATE), so a
// waiter that queued meanwhile is not handed the lock. Nobody passes it
// all the same: another client's fair TryLock, right after the release,
// is refused (the lock is free, or the waiter has it already), and the
// waiter is granted the lock with the next token.
func (s server) testFairReleaseBeforeTheBellKeepsTheOrder(t *testing.T) {
	ctx := testenv.Context(t, 60*time.Second)
	db := s.sqlDB(t)
	hd := s.open(t, s.Addr, fairTable)
	hd.bells.delay = time.Minute
	holder := dlock.New(hd, dlock.WithFair(), dlock.WithTTL(10*time.Second))
	other := dlock.New(s.open(t, s.Addr, fairTable), dlock.WithFair(), dlock.WithTTL(10*time.Second))
	waiter := dlock.New(s.open(t, s.Addr, fairTable), dlock.WithFair(), dlock.WithTTL(10*time.Second))
	name := "fair/" + t.Name()
	l, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		lw, err := waiter.Mutex(name).Lock(ctx)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- lw
	}()
	waitForWaiters(t, holder, name, 1)
	multi := func() int64 {
		var k string
		var v int64
		if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Com_update_multi'").Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	m0 := multi()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := multi() - m0; n != 0 {
		t.Errorf("the release sent %d multi-table UPDATEs, want 0: it read the queue though its bell was not taken", n)
	}
	if ol, err := other.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("a fair TryLock right after the release: %v (lease %v); want ErrNotAcquired, a waiter is queued", err, ol)
		if ol != nil {
			_ = ol.Unlock(ctx)
		}
	}
	select {
	case lw := <-got:
		if lw == nil {
			return
		}
		defer lw.Unlock(ctx)
		if lw.Token() != l.Token()+1 {
			t.Errorf("the waiter got token %d after the holder's %d", lw.Token(), l.Token())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the queued waiter was not granted the lock after the release")
	}
}

// testFairWaiterGrantedByItsOwnAttemptLeavesTheQueue: a queued waiter that
// finds the lock free and takes it with its own attempt (here, after a
// release before the bell, which hands nothing on) is no longer a live
// entry once its Lock returns: its release at once hands the lock to the
// waiter behind it, with the next token, not back to its own entry — an
// owner whose Lock has returned, which would hold the lock until its TTL.
func (s server) testFairWaiterGrantedByItsOwnAttemptLeavesTheQueue(t *testing.T) {
	ctx := testenv.Context(t, 60*time.Second)
	hd := s.open(t, s.Addr, fairTable)
	hd.bells.delay = time.Minute
	holder := dlock.New(hd, dlock.WithFair(), dlock.WithTTL(10*time.Second))
	fd := s.open(t, s.Addr, fairTable)
	fd.leaveAfter = time.Second // its entry is deleted late: it must be dead already
	first := dlock.New(fd, dlock.WithFair(), dlock.WithTTL(10*time.Second))
	second := dlock.New(s.open(t, s.Addr, fairTable), dlock.WithFair(), dlock.WithTTL(10*time.Second))
	name := "fair/" + t.Name()
	l, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lock := func(c *dlock.Client) <-chan *dlock.Lease {
		got := make(chan *dlock.Lease, 1)
		go func() {
			lw, err := c.Mutex(name).Lock(ctx)
			if err != nil && ctx.Err() == nil {
				t.Errorf("waiter: %v", err)
			}
			got <- lw
		}()
		return got
	}
	got1 := lock(first)
	waitForWaiters(t, holder, name, 1)
	got2 := lock(second)
	waitForWaiters(t, holder, name, 2)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l1 := <-got1
	if l1 == nil {
		return
	}
	if err := l1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l2 := <-got2:
		if l2 == nil {
			return
		}
		defer l2.Unlock(ctx)
		if l2.Token() != l1.Token()+1 {
			t.Errorf("the second waiter got token %d after the first's %d: the release handed the lock to another owner first", l2.Token(), l1.Token())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second waiter was not granted the lock within 5s of the first's release (its TTL is 10s): the release handed it to the first waiter's entry again")
	}
}

// testFairCancelledWaiterLeavesBeforeLockReturns: when a cancelled fair
// Lock returns, its entry is gone — Inspect shows no waiter — and the next
// release hands the lock to the waiter behind it, with the next token.
func (s server) testFairCancelledWaiterLeavesBeforeLockReturns(t *testing.T) {
	ctx := testenv.Context(t, 60*time.Second)
	holder := dlock.New(s.open(t, s.Addr, fairTable), dlock.WithFair(), dlock.WithTTL(10*time.Second))
	quitter := dlock.New(s.open(t, s.Addr, fairTable), dlock.WithFair(), dlock.WithTTL(10*time.Second))
	wd := s.open(t, s.Addr, fairTable)
	waiter := dlock.New(wd, dlock.WithFair(), dlock.WithTTL(10*time.Second))
	name := "fair/" + t.Name()
	l, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	qctx, qcancel := context.WithCancel(ctx)
	qerr := make(chan error, 1)
	go func() { _, err := quitter.Mutex(name).Lock(qctx); qerr <- err }()
	waitForWaiters(t, holder, name, 1)
	qcancel()
	if err := <-qerr; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v, want context.Canceled", err)
	}
	if n := waiters(t, holder, name); n != 0 {
		t.Fatalf("%d waiters queued after the cancelled Lock returned, want 0", n)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		lw, err := waiter.Mutex(name).Lock(ctx)
		if err != nil && ctx.Err() == nil {
			t.Errorf("waiter: %v", err)
		}
		got <- lw
	}()
	waitForWaiters(t, holder, name, 1)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lw := <-got
	if lw == nil {
		return
	}
	defer lw.Unlock(ctx)
	if lw.Token() != l.Token()+1 {
		t.Errorf("the waiter got token %d after the holder's %d: the lock was handed to the cancelled waiter first", lw.Token(), l.Token())
	}
}

// testFairWaiterKeepsItsPlace: a fair Lock that waits longer than its
// queue entry lives without renewal (queueMinTTL, for a 1s TTL) renews
// the entry as it waits: it is still a live waiter a second after that,
// and the release hands it the lock.
func (s server) testFairWaiterKeepsItsPlace(t *testing.T) {
	ctx := testenv.Context(t, 60*time.Second)
	holder := dlock.New(s.open(t, s.Addr, fairTable), dlock.WithFair(), dlock.WithTTL(time.Second))
	waiter := dlock.New(s.open(t, s.Addr, fairTable), dlock.WithFair(), dlock.WithTTL(time.Second))
	const name = "fair/keeps-its-place"
	l, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		lease *dlock.Lease
		err   error
	}
	got := make(chan outcome, 1)
	go func() {
		lw, err := waiter.Mutex(name).Lock(ctx)
		got <- outcome{lw, err}
	}()
	waitForWaiters(t, holder, name, 1)
	time.Sleep(queueMinTTL + time.Second)
	if n := waiters(t, holder, name); n != 1 {
		t.Fatalf("after %v of waiting: %d live waiters, want 1 (the waiter renews its entry)", queueMinTTL+time.Second, n)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-got:
		if o.err != nil {
			t.Fatal(o.err)
		}
		if o.lease.Token() <= l.Token() {
			t.Errorf("the waiter got token %d, want above %d", o.lease.Token(), l.Token())
		}
		_ = o.lease.Unlock(ctx)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter was not granted the lock at the release")
	}
}
