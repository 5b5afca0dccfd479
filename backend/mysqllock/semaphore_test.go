package mysqllock

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// TestPermitTableNamesFitMySQL: the permit table is "<table>_permits"
// while that fits MySQL's 64 characters, and a distinct name of 64
// characters for every longer lease-table name.
func TestPermitTableNamesFitMySQL(t *testing.T) {
	if got := permitTable(DefaultTable); got != "dlock_leases_permits" {
		t.Errorf("permitTable(%q) = %q", DefaultTable, got)
	}
	fits := strings.Repeat("t", 64-len(permitSuffix))
	if got := permitTable(fits); got != fits+permitSuffix {
		t.Errorf("permitTable(%d characters) = %q", len(fits), got)
	}
	seen := map[string]string{}
	for _, table := range []string{fits + "x", strings.Repeat("é", 64), strings.Repeat("é", 63) + "a", strings.Repeat("é", 63) + "b"} {
		got := permitTable(table)
		if n := len([]rune(got)); n != 64 || !strings.HasSuffix(got, permitSuffix) {
			t.Errorf("permitTable(%q) = %q (%d characters): want 64, ending in %s", table, got, n, permitSuffix)
		}
		if prev, dup := seen[got]; dup {
			t.Errorf("permitTable collision: %q and %q", prev, table)
		}
		seen[got] = table
	}
}

// testPermitBell: the permit bell that permitWait computes on the server is
// the one the holder's bell connection takes (permitBell); a waiter blocks
// on the bell of the permit that expires first, and its release wakes the
// waiter at once, by the bell (the driver's wake channel, with no polling
// layer above it).
func (s server) testPermitBell(t *testing.T) {
	db := s.sqlDB(t)
	holder, waiter := s.open(t, s.Addr, ""), s.open(t, s.Addr, "")
	name := "permit-bell"
	req := func(owner string) driver.Request {
		return driver.Request{Name: name, Owner: owner, TTL: time.Minute, Limit: 2, Holder: []byte(`{"limit":2}`)}
	}
	ctx := testenv.Context(t, 60*time.Second)
	var held []driver.Held
	for _, o := range []string{"0123456789abcdef0123456789abcde1", "0123456789abcdef0123456789abcde2"} {
		g, _, err := holder.TryAcquire(ctx, req(o))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, driver.Held{Name: name, Owner: o, Token: g.Token, Handle: g.Handle})
		defer holder.Release(ctx, held[len(held)-1])
	}
	first := permitBell(holder.table, name, held[0].Token)
	var onServer string
	if err := db.QueryRow("SELECT CONCAT('dlock:', LEFT(SHA2(CONCAT(?, ?), 256), 32))",
		permitBellPrefix(holder.table, name), held[0].Token).Scan(&onServer); err != nil || onServer != first {
		t.Fatalf("the server's permit bell %q (%v), Go's %q", onServer, err, first)
	}
	testenv.Eventually(t, 30*time.Second, "the holder to take its permits' bells", func() error {
		var a, b any
		if err := db.QueryRow("SELECT IS_USED_LOCK(?), IS_USED_LOCK(?)", first, permitBell(holder.table, name, held[1].Token)).Scan(&a, &b); err != nil {
			return err
		}
		if a == nil || b == nil {
			return errors.New("not taken")
		}
		return nil
	})

	wake, stop, err := waiter.Subscribe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, _, err := waiter.TryAcquire(ctx, req("0123456789abcdef0123456789abcde3")); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("TryAcquire with both permits held: %v, want ErrNotAcquired", err)
	}
	waitInGetLock(t, db, "the waiter")
	select {
	case <-wake:
		t.Fatal("the waiter was woken while both permits were held")
	default:
	}
	released := time.Now()
	if err := holder.Release(ctx, held[0]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
		t.Logf("woken %v after the release of the permit that expires first", time.Since(released).Round(time.Microsecond))
	case <-time.After(time.Second):
		t.Fatal("the waiter was not woken within 1s of the release of the permit whose bell it waits on")
	}
	g, _, err := waiter.TryAcquire(ctx, req("0123456789abcdef0123456789abcde3"))
	if err != nil {
		t.Fatalf("TryAcquire after the wake-up: %v", err)
	}
	if g.Token <= held[1].Token {
		t.Errorf("token %d after %d", g.Token, held[1].Token)
	}
	_ = waiter.Release(ctx, driver.Held{Name: name, Owner: "0123456789abcdef0123456789abcde3", Token: g.Token, Handle: g.Handle})
}

// testPermitsOnOldTable: a deployment migrated before semaphores has the
// lease table and no permit table, and a user without CREATE: its mutexes
// keep working, Inspect, List and Break included; a semaphore asks for the
// table to be created, and works once it is.
func (s server) testPermitsOnOldTable(t *testing.T) {
	const table = "old_leases"
	admin := s.open(t, s.Addr, "?table="+table)
	ctx := testenv.Context(t, 60*time.Second)
	if _, err := s.sqlDB(t).ExecContext(ctx, admin.q.createTable); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(s.URL(testenv.MariaDBLimitedUser, testenv.MariaDBLimitedPassword, s.Addr) + "?table=" + table)
	if err != nil {
		t.Fatal(err)
	}
	d, err := openURL(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	c := dlock.New(d)
	l, err := c.Mutex("m").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock on a lease table without a permit table: %v", err)
	}
	if in, err := c.Inspect(ctx, "free"); err != nil || in.Held {
		t.Errorf("Inspect of a free name: %+v, %v", in, err)
	}
	if infos, err := c.List(ctx, ""); err != nil || len(infos) != 1 || infos[0].Name != "m" || infos[0].Permits != nil {
		t.Errorf("List: %+v, %v; want the mutex m alone, without permits", infos, err)
	}
	if err := c.Break(ctx, "free"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Break of a free name: %v, want ErrNotHeld", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = c.Semaphore("s", 2).TryAcquire(ctx)
	if err == nil || !strings.Contains(err.Error(), "CREATE privilege") || !strings.Contains(err.Error(), "CREATE TABLE IF NOT EXISTS `"+table+"_permits`") {
		t.Fatalf("Semaphore.TryAcquire without the permit table and CREATE: %v; want advice to create it", err)
	}
	if err := admin.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := c.Semaphore("s", 2).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("Semaphore.TryAcquire after Migrate: %v", err)
	}
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// testPermitReleasedUnwatched: a release of a permit other than the one
// whose bell a waiter waits on rings nothing the waiter hears; it gets in
// at its next look, which the portable layer's retry bounds (every 1–2 s).
func (s server) testPermitReleasedUnwatched(t *testing.T) {
	db := s.sqlDB(t)
	holder := s.client(t, dlock.WithTTL(60*time.Second))
	waiter := s.client(t, dlock.WithTTL(60*time.Second))
	const name = "permit-unwatched"
	ctx := testenv.Context(t, 60*time.Second)
	first, err := holder.Semaphore(name, 2).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Unlock(ctx)
	time.Sleep(10 * time.Millisecond) // the second permit expires later
	second, err := holder.Semaphore(name, 2).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := waiter.Semaphore(name, 2).Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitInGetLock(t, db, "the waiter")
	released := time.Now()
	if err := second.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		return
	}
	took := time.Since(released)
	t.Logf("granted %v after the release of the permit not waited on", took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("granted %v after the release: want within the portable layer's retry (2 s) and a margin", took)
	}
	_ = l.Unlock(ctx)
}
