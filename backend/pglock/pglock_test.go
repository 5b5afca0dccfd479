package pglock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/pglock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// newPool connects to rawURL; the pool is closed when the test ends.
func newPool(t testing.TB, rawURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(testenv.Context(t, 30*time.Second), rawURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newDriver makes a driver over a pool of its own.
func newDriver(t testing.TB, rawURL string, opts ...pglock.Option) *pglock.Driver {
	t.Helper()
	d, err := pglock.New(newPool(t, rawURL), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func newClient(t testing.TB, rawURL string, opts ...pglock.Option) *dlock.Client {
	t.Helper()
	return dlock.New(newDriver(t, rawURL, opts...))
}

// TestHostileNamesAreStoredAndMatchedExactly: names with quotes, NUL bytes,
// SQL and LIKE metacharacters and the longest allowed length are bind
// parameters, never SQL text: each locks only itself and comes back as it
// went in, and the table survives.
func TestHostileNamesAreStoredAndMatchedExactly(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	c := newClient(t, srv.URL(srv.Addr, ""), pglock.WithTable(`odd"table; --`))
	other := newClient(t, srv.URL(srv.Addr, ""), pglock.WithTable(`odd"table; --`))
	names := []string{
		`x'); DROP TABLE "odd""table; --"; --`,
		`x'); DROP TABLE dlock_leases; --`,
		`"double" 'single' \back\slash`,
		"nul\x00inside", "nul\x00", "nul",
		"%", "_", "a%", "a_", "ab", `a\`,
		"$1", "?", "; SELECT pg_sleep(10); --",
		"ключ/名前/🔒",
		strings.Repeat("é", 512), // 1024 bytes
	}
	ctx := testenv.Context(t, 60*time.Second)
	leases := map[string]*dlock.Lease{}
	for _, n := range names {
		l, err := c.Mutex(n).TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock(%q): %v", n, err)
		}
		leases[n] = l
	}
	for _, n := range names {
		if _, err := other.Mutex(n).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryLock(%q) by another client: %v, want ErrNotAcquired", n, err)
		}
		in, err := other.Inspect(ctx, n)
		if err != nil || !in.Held || in.Name != n || in.Token != leases[n].Token() {
			t.Errorf("Inspect(%q) = %+v, %v; want held with token %d", n, in, err, leases[n].Token())
		}
	}
	// A prefix is bytes, not a pattern: "a%" lists only "a%".
	for prefix, want := range map[string][]string{
		"a%": {"a%"}, "a_": {"a_"}, "nul\x00": {"nul\x00", "nul\x00inside"}, "%": {"%"},
	} {
		infos, err := other.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, in := range infos {
			got = append(got, in.Name)
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("List(%q) = %q, want %q", prefix, got, want)
		}
	}
	all, err := other.List(ctx, "")
	if err != nil || len(all) != len(names) {
		t.Errorf("List(\"\") = %d locks, %v; want %d", len(all), err, len(names))
	}
	for _, n := range names {
		if err := leases[n].Unlock(ctx); err != nil {
			t.Errorf("Unlock(%q): %v", n, err)
		}
	}
	if got := srv.Exec(`SELECT count(*) FROM pg_tables WHERE tablename IN ('odd"table; --')`); strings.TrimSpace(got) != "1" {
		t.Errorf("the lock table is gone: %q", got)
	}
}

// TestRoleWithoutCreateIsToldWhatToGrant: a role that may not create the
// table gets an error naming the grants; once the schema owner has run
// Migrate and granted table privileges, the role can lock.
func TestRoleWithoutCreateIsToldWhatToGrant(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	srv.Exec(`CREATE ROLE locker LOGIN`)
	lockerURL := strings.Replace(srv.URL(srv.Addr, ""), "postgres://"+srv.User+"@", "postgres://locker@", 1)
	ctx := testenv.Context(t, 60*time.Second)

	locker := newClient(t, lockerURL)
	_, err := locker.Mutex("job").TryLock(ctx)
	if err == nil || !strings.Contains(err.Error(), `GRANT CREATE ON SCHEMA "public" TO "locker"`) || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("TryLock as a role without CREATE: %v; want an error that says what to grant", err)
	}
	// The driver's own error is classified, and names the table.
	_, _, err = newDriver(t, lockerURL).TryAcquire(ctx, driver.Request{Name: "job", Owner: "o", TTL: time.Minute})
	if !errors.Is(err, driver.ErrUnavailable) || !strings.Contains(err.Error(), `may not create the lock table "dlock_leases"`) {
		t.Fatalf("TryAcquire as a role without CREATE: %v; want ErrUnavailable naming the table", err)
	}

	admin := newDriver(t, srv.URL(srv.Addr, ""))
	if err := admin.Migrate(ctx); err != nil {
		t.Fatalf("Migrate as the schema owner: %v", err)
	}
	locker = newClient(t, lockerURL)
	_, err = locker.Mutex("job").TryLock(ctx)
	want := `GRANT SELECT, INSERT, UPDATE, DELETE ON "dlock_leases" TO "locker"; GRANT USAGE ON SEQUENCE "dlock_leases_token_seq" TO "locker"`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("TryLock as a role without table privileges: %v; want an error containing %q", err, want)
	}

	srv.Exec(want)
	locker = newClient(t, lockerURL)
	l, err := locker.Mutex("job").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the grants: %v", err)
	}
	// The grants of a version without semaphores: the role may not use
	// the permits table, yet Inspect, List and Break work, and a
	// semaphore says what to grant.
	if in, err := locker.Inspect(ctx, "job"); err != nil || !in.Held {
		t.Errorf("Inspect without the permits grant: %+v, %v", in, err)
	}
	if infos, err := locker.List(ctx, ""); err != nil || len(infos) != 1 {
		t.Errorf("List without the permits grant: %+v, %v", infos, err)
	}
	if err := locker.Break(ctx, "job"); err != nil {
		t.Errorf("Break without the permits grant: %v", err)
	}
	permitsGrant := `GRANT SELECT, INSERT, UPDATE, DELETE ON "dlock_leases_permits" TO "locker"`
	if _, err := locker.Semaphore("sem", 2).TryAcquire(ctx); !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), permitsGrant) {
		t.Errorf("Semaphore without the permits grant: %v; want ErrUnavailable containing %q", err, permitsGrant)
	}
	srv.Exec(permitsGrant)
	s, err := locker.Semaphore("sem", 2).TryAcquire(ctx) // the same client: it looks again
	if err != nil {
		t.Fatalf("Semaphore after the permits grant: %v", err)
	}
	if err := s.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Without the waiters grant, a plain Lock waits by retrying, and a
	// fair one says what to grant.
	held, err := locker.Mutex("queue").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock without the waiters grant: %v", err)
	}
	waited := make(chan error, 1)
	go func() {
		lw, err := newClient(t, lockerURL).Mutex("queue").Lock(ctx)
		if err == nil {
			err = lw.Unlock(ctx)
		}
		waited <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("a Lock that waited without the waiters grant: %v", err)
	}
	waitersGrant := `GRANT SELECT, INSERT, UPDATE, DELETE ON "dlock_leases_waiters" TO "locker"`
	if _, err := locker.Mutex("fair", dlock.WithFair()).Lock(ctx); !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), waitersGrant) {
		t.Errorf("fair Lock without the waiters grant: %v; want ErrUnavailable containing %q", err, waitersGrant)
	}
	srv.Exec(waitersGrant)
	f, err := locker.Mutex("fair", dlock.WithFair()).Lock(ctx)
	if err != nil {
		t.Fatalf("fair Lock after the waiters grant: %v", err)
	}
	if err := f.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Unlock of the broken lease: %v, want ErrLeaseLost", err)
	}
}

// TestGrantReportsTakeoverOfUnreleasedLease: Recovered is set when the
// previous lease expired or was broken, not when it was released.
func TestGrantReportsTakeoverOfUnreleasedLease(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	d := newDriver(t, srv.URL(srv.Addr, ""))
	ctx := testenv.Context(t, 60*time.Second)
	acquire := func(owner string, ttl time.Duration) driver.Grant {
		t.Helper()
		g, err := d.Acquire(ctx, driver.Request{Name: "n", Owner: owner, TTL: ttl, Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g1 := acquire("owner1", 200*time.Millisecond)
	if g1.Recovered {
		t.Error("first grant reported a takeover")
	}
	g2 := acquire("owner2", time.Minute) // waits for g1 to expire
	if !g2.Recovered || g2.Token <= g1.Token {
		t.Errorf("grant after expiry: %+v, want Recovered and a token above %d", g2, g1.Token)
	}
	if err := d.Release(ctx, driver.Held{Name: "n", Owner: "owner1"}); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("release by the expired owner: %v, want ErrLeaseLost", err)
	}
	if err := d.Release(ctx, driver.Held{Name: "n", Owner: "owner2"}); err != nil {
		t.Fatal(err)
	}
	g3 := acquire("owner3", time.Minute)
	if g3.Recovered || g3.Token <= g2.Token {
		t.Errorf("grant after release: %+v, want not Recovered and a token above %d", g3, g2.Token)
	}
	if err := d.Break(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if err := d.Extend(ctx, driver.Held{Name: "n", Owner: "owner3"}, time.Minute); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("extend after Break: %v, want ErrLeaseLost", err)
	}
	g4 := acquire("owner4", time.Minute)
	if !g4.Recovered || g4.Token <= g3.Token {
		t.Errorf("grant after Break: %+v, want Recovered and a token above %d", g4, g3.Token)
	}
}

// TestWaitersShareOneListenConnection: many waiters of one driver cost one
// LISTEN connection, and a release wakes them.
func TestWaitersShareOneListenConnection(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	u := srv.URL(srv.Addr, "application_name=waiters")
	holder := newClient(t, srv.URL(srv.Addr, ""))
	ctx := testenv.Context(t, 60*time.Second)
	l, err := holder.Mutex("busy").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiters := newClient(t, u)
	const n = 20
	got := make(chan *dlock.Lease, n)
	for range n {
		go func() {
			w, err := waiters.Mutex("busy", dlock.WithTTL(time.Minute)).Lock(ctx)
			if err != nil {
				t.Error(err)
				got <- nil
				return
			}
			got <- w
		}()
	}
	// Let the waiters subscribe, then count listening sessions.
	var count string
	testenv.Eventually(t, 30*time.Second, "the waiters to listen", func() error {
		count = strings.TrimSpace(srv.Exec(`SELECT count(*) FROM pg_stat_activity WHERE application_name = 'waiters' AND query LIKE 'LISTEN%'`))
		if count == "0" {
			return errors.New("no LISTEN connection")
		}
		return nil
	})
	if count != "1" {
		t.Errorf("%d waiters hold %s LISTEN connections, want 1", n, count)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Each waiter in turn gets the lock and hands it on.
	for range n {
		w := <-got
		if w == nil {
			continue
		}
		if err := w.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
}

// TestSubscriberIsWokenByRelease: the NOTIFY sent by a release on one
// driver reaches a subscriber on another, though the two spell the table
// differently: both listen on the channel of its schema-qualified name.
func TestSubscriberIsWokenByRelease(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	a := newDriver(t, srv.URL(srv.Addr, ""))
	b := newDriver(t, srv.URL(srv.Addr, ""), pglock.WithTable("public.dlock_leases"))
	ctx := testenv.Context(t, 60*time.Second)
	g, err := a.Acquire(ctx, driver.Request{Name: "n\x00", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wake, stop, err := b.Subscribe(ctx, "n\x00")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	other, stopOther, err := b.Subscribe(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	defer stopOther()
	if err := a.Release(ctx, driver.Held{Name: "n\x00", Owner: "o", Token: g.Token}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-ctx.Done():
		t.Fatal("the release sent no wake-up")
	}
	select {
	case <-other:
		t.Error("a release of \"n\\x00\" woke the waiter on \"n\"")
	default:
	}
}

// TestTableSpellingsShareSessionLocks: clients that name one table
// differently ("dlock_leases", "public.dlock_leases") hash the same
// advisory key, so the second does not get a session lock the first holds
// (it used to get its own advisory lock at once and take over the row).
func TestTableSpellingsShareSessionLocks(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	a := newClient(t, srv.URL(srv.Addr, ""), pglock.WithSessionLocks())
	b := newClient(t, srv.URL(srv.Addr, ""), pglock.WithTable("public.dlock_leases"), pglock.WithSessionLocks())
	ctx := testenv.Context(t, 60*time.Second)
	la, err := a.Mutex("job").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lb, err := b.Mutex("job").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		if lb != nil {
			_ = lb.Unlock(ctx)
		}
		t.Fatalf("TryLock through \"public.dlock_leases\" while held through \"dlock_leases\": %v, want ErrNotAcquired", err)
	}
	select {
	case <-la.Done():
		t.Fatalf("the first holder lost its lease: %v", la.Err())
	default:
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Mutex("job").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the release: %v", err)
	}
	if lb.Token() <= la.Token() {
		t.Errorf("token %d after %d", lb.Token(), la.Token())
	}
	_ = lb.Unlock(ctx)
}

// TestSessionLockLeavesRowWhoseKeyIsHeld: a session lock takes over
// another session's live row only when that row's own advisory key is
// held by no session — here a key held by another connection (as a client
// that hashed the table's name differently would hold it) — and takes it
// over at once when that connection ends.
func TestSessionLockLeavesRowWhoseKeyIsHeld(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	c := newClient(t, srv.URL(srv.Addr, ""), pglock.WithSessionLocks())
	if err := newDriver(t, srv.URL(srv.Addr, "")).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := pgx.Connect(ctx, srv.URL(srv.Addr, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	const otherKey = 4242
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock($1::bigint)`, otherKey); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `INSERT INTO dlock_leases (name, owner, token, expires_at, acquired_at, session_key)
		VALUES ('job'::bytea, 'someone', nextval('dlock_leases_token_seq'), clock_timestamp() + interval '1 hour', clock_timestamp(), $1)`, otherKey); err != nil {
		t.Fatal(err)
	}
	if l, err := c.Mutex("job").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		if l != nil {
			_ = l.Unlock(ctx)
		}
		t.Fatalf("TryLock over a live session row whose key is held: %v, want ErrNotAcquired", err)
	}
	if err := other.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The other session's advisory lock ends with its connection; the
	// server may take a moment to finish that backend.
	var l *dlock.Lease
	for l == nil {
		l, err = c.Mutex("job").TryLock(ctx)
		if err != nil && !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatal("the row was not taken over after its session ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = l.Unlock(ctx)
}

// TestURLOpTimeoutMustBePositive: a bad op_timeout is refused by name.
func TestURLOpTimeoutMustBePositive(t *testing.T) {
	for _, v := range []string{"0s", "-1s", "soon"} {
		_, err := dlock.Open(testenv.Context(t, 10*time.Second), "postgres://u@127.0.0.1:1/db?op_timeout="+v)
		if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "op_timeout") {
			t.Errorf("op_timeout=%s: %v, want ErrInvalidOption naming op_timeout", v, err)
		}
	}
}

// TestSessionAttemptRefusedByALeaseFreesItsAdvisoryLock: a session-mode
// TryLock that gets the advisory lock but finds a lease-mode holder's row
// frees the advisory lock before it returns, and keeps its connection for
// the next attempt. Closing the connection instead left the lock to the
// server process's exit, after the call had returned: a TryLock right after
// the lease's release then found the name held (a fresh-clone CI run did).
func TestSessionAttemptRefusedByALeaseFreesItsAdvisoryLock(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	lease := newClient(t, srv.URL(srv.Addr, ""))
	session := newClient(t, srv.URL(srv.Addr, "application_name=session-client"), pglock.WithSessionLocks())
	watch, err := pgx.Connect(ctx, srv.URL(srv.Addr, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(context.Background())
	l, err := lease.Mutex("job").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pids := map[int32]bool{}
	for i := range 10 {
		if l2, err := session.Mutex("job").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			if l2 != nil {
				_ = l2.Unlock(ctx)
			}
			t.Fatalf("attempt %d: TryLock of a name a lease holds: %v, want ErrNotAcquired", i, err)
		}
		var held int
		if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'`).Scan(&held); err != nil {
			t.Fatal(err)
		}
		if held != 0 {
			t.Errorf("attempt %d: %d advisory locks held after the refused TryLock returned; want 0", i, held)
		}
		rows, err := watch.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = 'session-client'`)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			t.Fatal(err)
		}
		for _, pid := range got {
			pids[pid] = true
		}
	}
	// The session connection, and at most one of the client's pool.
	if len(pids) > 2 {
		t.Errorf("10 refused attempts ran on %d server processes; want the same connection each time", len(pids))
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := session.Mutex("job").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock right after the lease's release: %v", err)
	}
	_ = l2.Unlock(ctx)
}

// TestLeaseAndSessionClientsShareATable: a lease-mode and a session-mode
// client of one table each respect the other's live row.
func TestLeaseAndSessionClientsShareATable(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	lease := newClient(t, srv.URL(srv.Addr, ""))
	session := newClient(t, srv.URL(srv.Addr, ""), pglock.WithSessionLocks())
	for _, tc := range []struct {
		name          string
		holder, other *dlock.Client
	}{
		{"held-by-session", session, lease},
		{"held-by-lease", lease, session},
	} {
		l, err := tc.holder.Mutex(tc.name).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l2, err := tc.other.Mutex(tc.name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			if l2 != nil {
				_ = l2.Unlock(ctx)
			}
			t.Errorf("%s: TryLock by the other mode: %v, want ErrNotAcquired", tc.name, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		l2, err := tc.other.Mutex(tc.name).TryLock(ctx)
		if err != nil {
			t.Fatalf("%s: TryLock by the other mode after the release: %v", tc.name, err)
		}
		_ = l2.Unlock(ctx)
	}
}
