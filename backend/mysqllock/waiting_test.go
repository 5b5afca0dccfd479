package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// TestUncontendedLockSendsTwoStatements: the package doc's "a Lock+Unlock
// that nobody waits for and that ends within bellDelay sends two
// statements: the acquire and the release", plain and fair, and "a fair
// lease whose bell is not taken yet is released by the plain release
// statement". The server's Questions counter, which counts every
// statement of every connection (the driver's pool and its bell
// connection alike), grows by two per Lock+Unlock; Com_update_multi, the
// multi-table UPDATEs (the fair hand-off, which reads the queue), by
// none. The bell's delay is lengthened so that a slow machine cannot make
// a Lock+Unlock outlast it.
func TestUncontendedLockSendsTwoStatements(t *testing.T) {
	s := server{testenv.StartMariaDB(t)}
	db := s.sqlDB(t)
	db.SetMaxOpenConns(1)
	counters := func() (questions, multi int64) {
		rows, err := db.Query("SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_update_multi')")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var v int64
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			if k == "Questions" {
				questions = v
			} else {
				multi = v
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return questions, multi
	}
	for _, mode := range []struct {
		name string
		opts []dlock.Option
	}{{"Plain", nil}, {"Fair", []dlock.Option{dlock.WithFair()}}} {
		t.Run(mode.name, func(t *testing.T) {
			d := s.open(t, s.Addr, "")
			d.bells.delay = time.Minute
			c := dlock.New(d, append([]dlock.Option{dlock.WithTTL(10 * time.Second)}, mode.opts...)...)
			ctx := testenv.Context(t, time.Minute)
			m := c.Mutex("uncontended/" + mode.name)
			lockUnlock := func() {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			lockUnlock() // the tables, the prepared statements, the bell connection
			time.Sleep(100 * time.Millisecond)
			const n = 50
			q0, m0 := counters()
			for range n {
				lockUnlock()
			}
			time.Sleep(100 * time.Millisecond) // a bell statement would be sent by now
			q1, m1 := counters()
			// The second SHOW STATUS counts itself.
			if got := q1 - q0 - 1; got != 2*n {
				t.Errorf("%d Lock+Unlock sent %d statements, want %d", n, got, 2*n)
			}
			if got := m1 - m0; got != 0 {
				t.Errorf("%d Lock+Unlock sent %d multi-table UPDATEs (releases that read the queue), want 0", n, got)
			}
		})
	}
}

// slotsHeld counts the held waiting slots of name.
func slotsHeld(t testing.TB, db *sql.DB, name string) int {
	t.Helper()
	held := 0
	for i := range waitSlots {
		var id sql.NullInt64
		if err := db.QueryRow("SELECT IS_USED_LOCK(?)", fmt.Sprintf("%s%d", waitingPrefix(DefaultTable, name), i)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if id.Valid {
			held++
		}
	}
	return held
}

// testReleaserStandsBack: the package doc's "a release that finds someone
// waiting makes its driver's next Lock of the name stand back", and "the
// waiter's slot is given back when its Lock returns". A waiter of another
// client holds a waiting slot while it waits; the holder's release sees it
// and marks the name to stand back; a release that nobody waited for does
// not. Once the waiter's Lock has returned, it holds no slot. And "TryLock
// never stands back": a try leaves the mark for the next Lock, which takes
// it.
func (s server) testReleaserStandsBack(t *testing.T) {
	db := s.sqlDB(t)
	d := s.open(t, s.Addr, "")
	holder := dlock.New(d, dlock.WithTTL(30*time.Second))
	waiter := s.client(t, dlock.WithTTL(30*time.Second))
	ctx := testenv.Context(t, time.Minute)
	name := "stand-back"
	standing := func() bool {
		d.ymu.Lock()
		defer d.ymu.Unlock()
		_, ok := d.yields[name]
		return ok
	}

	d.standBack(name)
	owner := strings.Repeat("ab", 16)
	g, err := d.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !standing() {
		t.Error("a TryLock stood back")
	}
	if err := d.Release(ctx, driver.Held{Name: name, Owner: owner, Token: g.Token}); err != nil {
		t.Fatal(err)
	}
	l, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if standing() {
		t.Error("a Lock left the stand-back mark in place")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if standing() {
		t.Fatal("a release that nobody waited for stands back")
	}

	l, err = holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		l2, err := waiter.Mutex(name).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	waitInGetLock(t, db, "the waiter")
	if n := slotsHeld(t, db, name); n != 1 {
		t.Errorf("a waiter blocked in GET_LOCK holds %d waiting slots, want 1", n)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !standing() {
		t.Error("a release that found a waiter does not stand back")
	}
	l2 := <-got
	if l2 == nil {
		return
	}
	defer l2.Unlock(ctx)
	testenv.Eventually(t, 30*time.Second, "the waiter to give its slot back", func() error {
		if n := slotsHeld(t, db, name); n != 0 {
			return errors.New("still held")
		}
		return nil
	})
}

// testCancelledWaiterGivesSlotBack: a cancelled Lock leaves no waiting slot
// held once it has returned (its session gives the slot back, or the
// server drops it as the session ends).
func (s server) testCancelledWaiterGivesSlotBack(t *testing.T) {
	db := s.sqlDB(t)
	holder := s.client(t, dlock.WithTTL(30*time.Second))
	l, err := holder.Mutex("cancel-slot").TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	waiter := s.client(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Mutex("cancel-slot").Lock(ctx)
		done <- err
	}()
	waitInGetLock(t, db, "the waiter")
	if n := slotsHeld(t, db, "cancel-slot"); n != 1 {
		t.Errorf("a waiter blocked in GET_LOCK holds %d waiting slots, want 1", n)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v", err)
	}
	// Given back just after the Lock returned, by the waiter's session or
	// by the server as it ends that session.
	testenv.Eventually(t, 30*time.Second, "the cancelled waiter's slot to be given back", func() error {
		if n := slotsHeld(t, db, "cancel-slot"); n != 0 {
			return fmt.Errorf("%d slots held", n)
		}
		return nil
	})
}

// testGrantWithWaitersTakesBellAtOnce: the package doc's "a grant that
// finds a waiting slot held takes its bell at once". Two clients wait for
// a held lock; both have their bell's delay lengthened to a minute, so
// that the one granted after the release holds its bell within the test
// only because its grant saw the other waiting.
func (s server) testGrantWithWaitersTakesBellAtOnce(t *testing.T) {
	s.waitedGrantTakesItsBell(t, "waited-grant", func(b *bells) { b.delay = time.Minute })
}

// testWaitedGrantTakesBellPastTheQuietBound: the package doc's "a grant
// that found someone waiting takes its bell whatever the bound". As
// testGrantWithWaitersTakesBellAtOnce, with the two waiters' drivers
// allowed no bell for a lease nobody waited for.
func (s server) testWaitedGrantTakesBellPastTheQuietBound(t *testing.T) {
	s.waitedGrantTakesItsBell(t, "waited-grant-unbounded", func(b *bells) { b.maxQuiet = 0 })
}

// waitedGrantTakesItsBell: two clients, their drivers' bells set up by
// with, wait for a held lock; the one granted at its release holds its
// bell, which its grant took because the other was waiting.
func (s server) waitedGrantTakesItsBell(t *testing.T, name string, with func(*bells)) {
	db := s.sqlDB(t)
	holder := s.client(t, dlock.WithTTL(30*time.Second))
	ctx := testenv.Context(t, time.Minute)
	l, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 2)
	for range 2 {
		d := s.open(t, s.Addr, "")
		with(d.bells)
		c := dlock.New(d, dlock.WithTTL(30*time.Second))
		go func() {
			l, err := c.Mutex(name).Lock(ctx)
			if err != nil && ctx.Err() == nil {
				t.Error(err)
			}
			got <- l
		}()
	}
	testenv.Eventually(t, 30*time.Second, "both waiters to hold a waiting slot", func() error {
		if n := slotsHeld(t, db, name); n != 2 {
			return fmt.Errorf("%d slots held", n)
		}
		return nil
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	first := <-got
	if first == nil {
		return
	}
	waitBellHeld(t, db, name)
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if second := <-got; second != nil {
		_ = second.Unlock(ctx)
	}
}

// testQuietBellsAreBounded: the package doc's "a Driver holds at most
// 1,024 bells of leases that nobody waited for". With the bound lowered to 2,
// a client holding 5 such locks holds 2 bells, and keeps holding 2. A
// release of one of them drops its bell at once, and the room it leaves
// is taken at the keeper's next look at every claim (every
// bellKeepAlive; here made at once), not by each release.
func (s server) testQuietBellsAreBounded(t *testing.T) {
	db := s.sqlDB(t)
	d := s.open(t, s.Addr, "")
	d.bells.maxQuiet = 2
	c := dlock.New(d, dlock.WithTTL(30*time.Second))
	ctx := testenv.Context(t, time.Minute)
	leases := map[string]*dlock.Lease{}
	for i := range 5 {
		name := fmt.Sprintf("quiet/%d", i)
		l, err := c.Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases[name] = l
		defer l.Unlock(ctx)
	}
	withBell := func() (names []string) {
		for name := range leases {
			if bellHeld(t, db, name) {
				names = append(names, name)
			}
		}
		return names
	}
	bells := func(want int) func() error {
		return func() error {
			if n := len(withBell()); n != want {
				return fmt.Errorf("%d bells held", n)
			}
			return nil
		}
	}
	testenv.Eventually(t, 10*time.Second, "the holder to take two bells", bells(2))
	time.Sleep(100 * bellDelay) // the keeper's later rounds take no more
	if n := len(withBell()); n != 2 {
		t.Errorf("%d of 5 quiet locks hold their bell, want the bound: 2", n)
	}
	name := withBell()[0]
	if err := leases[name].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	delete(leases, name)
	testenv.Eventually(t, 10*time.Second, "the released lock's bell dropped", func() error {
		if usedLock(t, db, bellName(DefaultTable, name)) {
			return fmt.Errorf("the released %s still holds its bell", name)
		}
		return nil
	})
	if n := len(withBell()); n != 1 {
		t.Errorf("after one release, %d of the 4 locks held hold their bell, want 1", n)
	}
	d.bells.mu.Lock()
	d.bells.nextFull = time.Time{}
	d.bells.mu.Unlock()
	d.bells.signal()
	testenv.Eventually(t, 10*time.Second, "a look at every claim to take the room left", bells(2))
}

// testHeldLockTakesBellSoon: the package doc's "otherwise 5 ms after the
// grant". A lock that nobody waits for, still held, holds its bell well
// before the bell keeper's next keep-alive round (20 s) would take it: the
// bound here is 10 s, half of that, to leave a loaded machine room.
func (s server) testHeldLockTakesBellSoon(t *testing.T) {
	db := s.sqlDB(t)
	c := s.client(t, dlock.WithTTL(30*time.Second))
	ctx := testenv.Context(t, time.Minute)
	for i := range 3 { // the first grant also starts the bell connection
		name := fmt.Sprintf("soon/%d", i)
		l, err := c.Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, "the holder to take its bell", func() error {
			if !bellHeld(t, db, name) {
				return errors.New("not taken")
			}
			return nil
		})
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// usedLock reports whether any session holds the user lock name.
func usedLock(t testing.TB, db *sql.DB, name string) bool {
	t.Helper()
	var id sql.NullInt64
	if err := db.QueryRow("SELECT IS_USED_LOCK(?)", name).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id.Valid
}
