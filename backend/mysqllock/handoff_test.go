package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// countingDriver counts the acquire attempts (TryAcquire calls) its
// driver makes.
type countingDriver struct {
	*Driver
	attempts *atomic.Int64
}

func (c countingDriver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	return driver.AcquireByRetry(ctx, req, c)
}

func (c countingDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, time.Duration, error) {
	c.attempts.Add(1)
	return c.Driver.TryAcquire(ctx, req)
}

// testReleaseRingsOneBell queues 8 waiters, each a client of its own (as
// separate processes are), behind a holder, one after another, and lets
// the lock pass down the queue: each waiter, once granted, holds it
// briefly and releases it. A release rings only the first waiter's bell,
// so the lock is granted in arrival order and each grant costs about one
// attempt; were every waiter woken by every release, the 8 grants would
// cost 8+7+…+1 = 36 attempts, 4.5 per grant. (The portable layer's
// fallback poll, every 1–2 s per waiter, adds a few when the machine is
// slow; hence the margin.)
func (s server) testReleaseRingsOneBell(t *testing.T) {
	const waiters = 8
	db, name, ctx, first, base := s.heldWithBell(t, "one-bell")

	var attempts atomic.Int64
	var mu sync.Mutex
	var order []int
	tokens := []uint64{first.Token()}
	errs := make(chan error, waiters)
	for i := range waiters {
		c := dlock.New(countingDriver{s.open(t, s.Addr, ""), &attempts}, dlock.WithTTL(time.Minute))
		queue(t, db, base+i+1, func() {
			l, err := c.Mutex(name).Lock(ctx)
			if err != nil {
				errs <- fmt.Errorf("waiter %d: %w", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			tokens = append(tokens, l.Token())
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			errs <- l.Unlock(ctx)
		})
	}
	before := attempts.Load()
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range waiters {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	perGrant := float64(attempts.Load()-before) / waiters
	t.Logf("%d attempts for %d grants (%.2f per grant); grant order %v", attempts.Load()-before, waiters, perGrant, order)
	if perGrant > 2 {
		t.Errorf("%.2f attempts per grant, want about 1: releases wake more than the next waiter", perGrant)
	}
	for i, w := range order {
		if w != i {
			t.Errorf("grant order %v, want arrival order", order)
			break
		}
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("tokens %v do not increase", tokens)
			break
		}
	}
}

// heldWithBell takes a fresh lock name for a minute and waits until its
// holder has its bell; base is the number of sessions waiting in GET_LOCK
// then.
func (s server) heldWithBell(t *testing.T, prefix string) (db *sql.DB, name string, ctx context.Context, first *dlock.Lease, base int) {
	t.Helper()
	db = s.sqlDB(t)
	name = fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
	ctx = testenv.Context(t, 2*time.Minute)
	first, err := s.client(t, dlock.WithTTL(time.Minute)).Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitBellHeld(t, db, name)
	return db, name, ctx, first, waitingSessions(t, db)
}

// queue starts lock in a goroutine, and returns once it waits on the
// server — on the bell (the first waiter) or for the line (the others) —
// that is, once n sessions wait in GET_LOCK.
func queue(t *testing.T, db *sql.DB, n int, lock func()) {
	t.Helper()
	go lock()
	deadline := time.Now().Add(30 * time.Second)
	for waitingSessions(t, db) < n {
		if time.Now().After(deadline) {
			t.Fatalf("waiter %d never waited in GET_LOCK", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testGaveUpWaiterPassesLine: the first waiter in line (on the bell) and a
// waiter further back give up; the release then reaches the next waiter
// that still waits, and the lock goes down the line in arrival order.
func (s server) testGaveUpWaiterPassesLine(t *testing.T) {
	db, name, ctx, first, base := s.heldWithBell(t, "gave-up")
	const waiters = 4
	cancels := make([]context.CancelFunc, waiters)
	granted := make(chan int, waiters)
	errs := make(chan error, waiters)
	for i := range waiters {
		c := s.client(t, dlock.WithTTL(time.Minute))
		wctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		queue(t, db, base+i+1, func() {
			l, err := c.Mutex(name).Lock(wctx)
			if err != nil {
				errs <- err
				return
			}
			granted <- i
			errs <- l.Unlock(ctx)
		})
	}
	for _, i := range []int{0, 2} {
		cancels[i]()
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiter: %v", err)
		}
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []int{1, 3} {
		if got := <-granted; got != want {
			t.Fatalf("granted to waiter %d, want %d (the next that still waits)", got, want)
		}
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// lineWaiters counts the sessions waiting for name's line.
func lineWaiters(t *testing.T, db *sql.DB, name string) int {
	t.Helper()
	var n int
	err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE CONCAT('%', ?, '%') AND ID <> CONNECTION_ID()",
		lineName(DefaultTable, name)).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// testDeadWaiterPassesLine: the first waiter in line loses its
// connections, as a killed process does; the server drops its user locks,
// the next waiter leaves the line's queue to wait on the bell, and the
// release grants it the lock.
func (s server) testDeadWaiterPassesLine(t *testing.T) {
	db, name, ctx, first, base := s.heldWithBell(t, "dead")
	p := testenv.NewProxy(t, s.Addr)
	dead := dlock.New(s.open(t, p.Addr(), ""), dlock.WithTTL(time.Minute))
	next := s.client(t, dlock.WithTTL(time.Minute))
	deadCtx, cancelDead := context.WithCancel(ctx)
	defer cancelDead()
	granted := make(chan error, 1)
	queue(t, db, base+1, func() { _, _ = dead.Mutex(name).Lock(deadCtx) })
	queue(t, db, base+2, func() {
		l, err := next.Mutex(name).Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		granted <- err
	})
	if n := lineWaiters(t, db, name); n != 1 {
		t.Fatalf("%d sessions wait for the line, want 1 (the second waiter)", n)
	}
	p.Close()
	deadline := time.Now().Add(30 * time.Second)
	for lineWaiters(t, db, name) != 0 || waitingSessions(t, db) != base+1 {
		if time.Now().After(deadline) {
			t.Fatalf("the second waiter did not move up to the bell: %d wait for the line, %d in GET_LOCK (want 0, %d)",
				lineWaiters(t, db, name), waitingSessions(t, db), base+1)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatalf("the second waiter: %v", err)
	}
}
