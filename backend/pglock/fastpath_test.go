package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/pglock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// statementCounter counts the statements a pool sends: each query, and
// each statement of a batch.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}

func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TestUncontendedLockIsOneStatementAndUnlockOne: the package doc's "a
// lock that is free and that nobody waits for is taken in one statement,
// and released in one". Lock and TryLock of a free lock, plain and fair,
// then Unlock, send two statements between them on the driver's pool.
func TestUncontendedLockIsOneStatementAndUnlockOne(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	cfg, err := pgxpool.ParseConfig(srv.URL(srv.Addr, ""))
	if err != nil {
		t.Fatal(err)
	}
	count := &statementCounter{}
	cfg.ConnConfig.Tracer = count
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d, err := pglock.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	c := dlock.New(d, dlock.WithTTL(time.Minute))
	for _, fair := range []bool{false, true} {
		for _, try := range []bool{false, true} {
			t.Run(fmt.Sprintf("fair=%v/try=%v", fair, try), func(t *testing.T) {
				var opts []dlock.Option
				if fair {
					opts = append(opts, dlock.WithFair())
				}
				m := c.Mutex(fmt.Sprintf("uncontended/%v/%v", fair, try), opts...)
				lockUnlock := func() {
					t.Helper()
					lock := m.Lock
					if try {
						lock = m.TryLock
					}
					l, err := lock(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if err := l.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				}
				lockUnlock() // the tables, and the name's row
				const n = 10
				before := count.n.Load()
				for range n {
					lockUnlock()
				}
				if got := count.n.Load() - before; got > 2*n {
					t.Errorf("%d lock+unlock sent %d statements, want at most %d", n, got, 2*n)
				}
			})
		}
	}
}

// TestReleaseRingsOnlyTheNextWaitersBell: the package doc's "a release
// tells the waiter it hands the lock to, and no one else". Four
// waiters, each a client with a LISTEN connection of its own, queue one
// after another; each release hands the lock to the next, in arrival
// order, and the only notification each client's LISTEN connection
// receives is its own hand-off.
func TestReleaseRingsOnlyTheNextWaitersBell(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			var opts []dlock.Option
			if fair {
				opts = append(opts, dlock.WithFair())
			}
			ctx := testenv.Context(t, 60*time.Second)
			name := fmt.Sprintf("bell/%v", fair)
			holder := newClient(t, srv.URL(srv.Addr, ""))
			l, err := holder.Mutex(name, opts...).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			const waiters = 4
			drivers := make([]*pglock.Driver, waiters)
			type grant struct {
				waiter int
				lease  *dlock.Lease
				err    error
			}
			// Buffered, and no t in the goroutines: a Lock that fails
			// after the test gave up must not report to it.
			granted := make(chan grant, waiters)
			for i := range drivers {
				// A long waiter TTL: no waiter's heartbeat looks again
				// while the test runs; only the bell wakes it.
				drivers[i] = newDriver(t, srv.URL(srv.Addr, ""), pglock.WithWaiterTTL(3*time.Minute))
				c := dlock.New(drivers[i], dlock.WithTTL(time.Minute))
				go func() {
					lw, err := c.Mutex(name, opts...).Lock(ctx)
					granted <- grant{i, lw, err}
				}()
				waitersShown(t, holder, name, i+1)
			}
			heard := func() []int64 {
				h := make([]int64, waiters)
				for i, d := range drivers {
					h[i] = pglock.Heard(d)
				}
				return h
			}
			start := heard()
			last := l
			for want := range waiters {
				if err := last.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				var g grant
				select {
				case g = <-granted:
				case <-time.After(30 * time.Second):
					t.Fatalf("no waiter was granted the lock after release %d (heard %v since they queued)", want, sub(heard(), start))
				}
				if g.err != nil {
					t.Fatalf("waiter %d: %v", g.waiter, g.err)
				}
				if fair && g.waiter != want {
					t.Errorf("release %d granted waiter %d, want %d (arrival order)", want, g.waiter, want)
				}
				next := g.lease
				if next.Token() <= last.Token() {
					t.Errorf("token %d after %d", next.Token(), last.Token())
				}
				last = next
			}
			// (The last release hands the lock to nobody: it frees it and
			// wakes, on the table's channel, whoever waits without the
			// queue. Not counted.)
			for i, n := range sub(heard(), start) {
				if n != 1 {
					t.Errorf("waiter %d's LISTEN connection received %d notifications, want 1 (its hand-off)", i, n)
				}
			}
			if err := last.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func sub(a, b []int64) []int64 {
	d := make([]int64, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	return d
}

// TestFastPathTokenIsAboveEveryEarlierGrant: the package doc's "the fast
// path's token is drawn from the sequence under the name's row lock, as
// every grant's". Readers draw their tokens for the permits table, not
// the name's row; a writer that then takes the free name by the fast
// path (Lock and TryLock) has a token above all of theirs.
func TestFastPathTokenIsAboveEveryEarlierGrant(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	c := newClient(t, srv.URL(srv.Addr, ""))
	const name = "fastpath/tokens"
	var last uint64
	check := func(what string, l *dlock.Lease, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if l.Token() <= last {
			t.Errorf("%s: token %d, want above %d, the last grant's", what, l.Token(), last)
		}
		last = l.Token()
	}
	rw := c.RWMutex(name)
	w, err := rw.Lock(ctx)
	check("writer", w, err)
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var readers []*dlock.Lease
	for i := range 3 {
		r, err := rw.RLock(ctx)
		check(fmt.Sprintf("reader %d", i), r, err)
		readers = append(readers, r)
	}
	for _, r := range readers {
		if err := r.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w, err = rw.Lock(ctx)
	check("writer after the readers", w, err)
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := rw.RLock(ctx)
	check("reader", r, err)
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w, err = rw.TryLock(ctx)
	check("writer's TryLock after a reader", w, err)
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestFastPathSeesAWaiterQueuedWhileItRan: the package doc's "the fast
// path grants only if the row it locks is the version its snapshot saw".
// A transaction queues a live waiter under the name's row lock, and holds
// it while a fair TryLock of the free name waits for that lock; once the
// waiter is committed, the TryLock must not pass it, though the
// statement's snapshot was taken before the waiter was there.
//
// Also on a server whose sessions default to REPEATABLE READ, where the
// fast path's statement fails with a serialization failure when the row
// changed as it waited: it runs again as READ COMMITTED (readCommitted).
func TestFastPathSeesAWaiterQueuedWhileItRan(t *testing.T) {
	atEachIsolation(t, testFastPathSeesAWaiter)
}

// isolations are the URL parameters of the default isolation levels the
// tests run under: the server's (READ COMMITTED), REPEATABLE READ and
// SERIALIZABLE.
var isolations = []string{"", "options=-c%20default_transaction_isolation%3Drepeatable%5C%20read",
	"options=-c%20default_transaction_isolation%3Dserializable"}

// atEachIsolation runs test on one server once for each default
// isolation level of isolations, each in a subtest.
func atEachIsolation(t *testing.T, test func(t *testing.T, srv *testenv.Postgres, iso string)) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	for _, iso := range isolations {
		t.Run("isolation="+strings.TrimPrefix(iso, "options="), func(t *testing.T) { test(t, srv, iso) })
	}
}

func testFastPathSeesAWaiter(t *testing.T, srv *testenv.Postgres, iso string) {
	ctx := testenv.Context(t, 60*time.Second)
	d := newDriver(t, srv.URL(srv.Addr, iso))
	c := dlock.New(d)
	name := "fastpath/race" + iso
	m := c.Mutex(name, dlock.WithFair())
	l, err := m.Lock(ctx) // the tables, and the name's row, free after
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, srv.URL(srv.Addr, ""))
	commit := queueWaiterUncommitted(t, ctx, pool, d, name)
	got := make(chan error, 1)
	go func() {
		l, err := m.TryLock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waitsForRowLock(t, ctx, pool, pglock.FastAcquireSQL(d))
	commit()
	if err := <-got; !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("fair TryLock of a free lock, with a waiter queued while it ran: %v, want ErrNotAcquired", err)
	}
}

// TestReleaseSeesAWaiterQueuedWhileItRan: the package doc's "a release
// frees the lock in one cheap statement only if nobody is queued for the
// name when it takes effect". The holder took the lock by the fast path,
// so its release first tries freeSQL, whose snapshot sees an empty queue.
// A transaction queues a live waiter under the name's row lock and holds
// that lock while the release waits for it; once the waiter is committed
// the release must hand the lock to it, not free the lock with the waiter
// still queued.
//
// Also on a server whose sessions default to REPEATABLE READ (see
// TestFastPathSeesAWaiterQueuedWhileItRan).
func TestReleaseSeesAWaiterQueuedWhileItRan(t *testing.T) {
	atEachIsolation(t, testReleaseSeesAWaiter)
}

func testReleaseSeesAWaiter(t *testing.T, srv *testenv.Postgres, iso string) {
	ctx := testenv.Context(t, 60*time.Second)
	d := newDriver(t, srv.URL(srv.Addr, iso))
	c := dlock.New(d, dlock.WithTTL(time.Minute))
	name := "free/race" + iso
	l, err := c.Mutex(name).Lock(ctx) // free and unqueued: the fast path
	if err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, srv.URL(srv.Addr, ""))
	commit := queueWaiterUncommitted(t, ctx, pool, d, name)
	got := make(chan error, 1)
	go func() { got <- l.Unlock(ctx) }()
	waitsForRowLock(t, ctx, pool, pglock.FreeSQL(d))
	commit()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	var owner string
	var token int64
	var queued bool
	if err := pool.QueryRow(ctx, `SELECT owner, token, EXISTS (SELECT FROM dlock_leases_waiters WHERE name = $1) FROM dlock_leases WHERE name = $1`,
		[]byte(name)).Scan(&owner, &token, &queued); err != nil {
		t.Fatal(err)
	}
	if owner != "waiter" || queued {
		t.Errorf("after the release, the lock's owner is %q and the waiter is queued: %v; want the lock handed to the waiter", owner, queued)
	}
	if uint64(token) <= l.Token() {
		t.Errorf("handed-off token %d, want above %d", token, l.Token())
	}
}

// TestJoinIsJudgedOnTheRowsNewestVersion: the package doc's "a Lock of
// a lock held by another joins the queue in one statement, which joins
// only if the lock is still held by another when it holds the name's row
// lock". While the join's statement (joinQueueAloneSQL) waits for the
// row lock, a transaction releases the lock, or hands it to the joiner,
// or to someone else; once it commits, the join must change nothing in
// the first two cases (the caller then takes the attempt that may
// grant), and must join, reporting the new holder's token, in the third.
func TestJoinIsJudgedOnTheRowsNewestVersion(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	d := newDriver(t, srv.URL(srv.Addr, ""))
	c := dlock.New(d, dlock.WithTTL(time.Minute))
	pool := newPool(t, srv.URL(srv.Addr, ""))
	for _, tc := range []struct {
		name      string
		meanwhile string // what the transaction does to the name's row
		join      bool   // whether the join joins
	}{
		{name: "released", meanwhile: `owner = '', holder = NULL, expires_at = '-infinity'`},
		{name: "handed to the joiner", meanwhile: `owner = 'joiner', token = nextval('dlock_leases_token_seq'), expires_at = clock_timestamp() + interval '1 minute'`},
		{name: "handed to another", meanwhile: `owner = 'other', token = nextval('dlock_leases_token_seq'), expires_at = clock_timestamp() + interval '1 minute'`, join: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "join/" + tc.name
			l, err := c.Mutex(name).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			var token int64
			if err := tx.QueryRow(ctx, `UPDATE dlock_leases SET `+tc.meanwhile+` WHERE name = $1 RETURNING token`, []byte(name)).Scan(&token); err != nil {
				t.Fatal(err)
			}
			type reply struct {
				token int64
				err   error
			}
			got := make(chan reply, 1)
			go func() {
				var r reply
				r.err = pool.QueryRow(ctx, pglock.JoinQueueAloneSQL(d), []byte(name), "joiner", nil, time.Minute.Microseconds(),
					time.Minute.Microseconds(), "nobody", int64(0)).Scan(nil, &r.token, nil, nil, nil)
				got <- r
			}()
			waitsForRowLock(t, ctx, pool, pglock.JoinQueueAloneSQL(d))
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-got
			var queued bool
			if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM dlock_leases_waiters WHERE name = $1 AND owner = 'joiner')`,
				[]byte(name)).Scan(&queued); err != nil {
				t.Fatal(err)
			}
			switch {
			case !tc.join && !errors.Is(r.err, pgx.ErrNoRows):
				t.Errorf("join after %s: token %d, err %v; want no row", tc.meanwhile, r.token, r.err)
			case !tc.join && queued:
				t.Errorf("join after %s queued the joiner", tc.meanwhile)
			case tc.join && r.err != nil:
				t.Errorf("join after the lock changed hands: %v", r.err)
			case tc.join && (r.token != token || !queued):
				t.Errorf("join after the lock changed hands: token %d (want the new holder's, %d), queued: %v", r.token, token, queued)
			}
			_ = l // held by the test's client until the transaction took it over
		})
	}
}

// queueWaiterUncommitted queues a live waiter ("waiter") for name as the
// queue's transactions do, the name's row lock first, and leaves the
// transaction open, holding that lock, until commit is called (or the
// test ends). The waiter's LISTEN connection is the transaction's: it
// holds the advisory lock the entry names, so the entry is live.
func queueWaiterUncommitted(t *testing.T, ctx context.Context, pool *pgxpool.Pool, d *pglock.Driver, name string) (commit func()) {
	t.Helper()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	const listenKey = 424242
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, listenKey); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, pglock.LockNameSQL(d), []byte(name)); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO dlock_leases_waiters (name, owner, seq, ttl_us, reply, listen_key, expires_at)
		VALUES ($1, 'waiter', nextval('dlock_leases_token_seq'), 60000000, 'nobody', $2, clock_timestamp() + interval '1 minute')`,
		[]byte(name), listenKey); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// waitsForRowLock waits until a session runs sql and waits for a lock.
// (The server shows a long statement's text cut to
// track_activity_query_size: the text shown is a prefix of sql.)
func waitsForRowLock(t *testing.T, ctx context.Context, pool *pgxpool.Pool, sql string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "the statement waiting for the name's row lock", func() error {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query <> '' AND starts_with($1::text, query)`, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return fmt.Errorf("no statement waits")
		}
		return nil
	})
}

// TestLockCancelledWhileItsFastPathRanLeavesTheLockFree: a Lock whose
// context ends while its one statement waits for the name's row lock
// returns the context's error, and the lock that statement granted is
// released before Lock returns (within a bound of its own, since the
// caller's context has ended), not left held for its TTL.
func TestLockCancelledWhileItsFastPathRanLeavesTheLockFree(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	c := dlock.New(newDriver(t, srv.URL(srv.Addr, "")), dlock.WithTTL(time.Minute))
	const name = "fastpath/cancelled"
	m := c.Mutex(name)
	l, err := m.Lock(ctx) // the tables, and the name's row, free after
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, srv.URL(srv.Addr, ""))
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// Locks the name's row without writing it: the fast path waits, then
	// grants, since the row it sees is unchanged.
	if _, err := tx.Exec(ctx, `SELECT FROM dlock_leases WHERE name = $1 FOR UPDATE`, []byte(name)); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		l, err := m.Lock(lctx)
		if err == nil {
			_ = l.Unlock(ctx)
		}
		got <- err
	}()
	testenv.Eventually(t, 30*time.Second, "the Lock waiting for the name's row lock", func() error {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%ON CONFLICT%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return fmt.Errorf("no statement waits")
		}
		return nil
	})
	cancel()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock cancelled while its statement waited: %v, want context.Canceled", err)
	}
	other := dlock.New(newDriver(t, srv.URL(srv.Addr, "")))
	l2, err := other.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the cancelled Lock returned: %v; the grant its statement made was not released", err)
	}
	_ = l2.Unlock(ctx)
}

// sqlCounter counts the times a pool sends one statement, alone or in a
// batch; the statement is set once the driver has bound it.
type sqlCounter struct {
	sql atomic.Pointer[string]
	n   atomic.Int64
	all atomic.Int64 // every statement, alone or in a batch, but the LISTEN connection's
}

func (c *sqlCounter) see(sql string) {
	if !strings.HasPrefix(sql, "LISTEN ") { // the LISTEN connection's, made on the first wait
		c.all.Add(1)
	}
	if p := c.sql.Load(); p != nil && *p == sql {
		c.n.Add(1)
	}
}

func (c *sqlCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.see(d.SQL)
	return ctx
}

func (c *sqlCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *sqlCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *sqlCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.see(d.SQL)
}

func (c *sqlCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TestLockAfterItsHandOffGoesToTheQueueAtOnce: the package doc's "a
// client whose last release of a name handed the lock to a waiter queues
// at once". A client that handed the lock on and locks the name again
// (a worker that takes turns with others) sends no fast-path statement,
// which would find the lock held; it queues and is handed the lock in
// its turn, with a higher token. Once its release of the name frees the
// lock (nobody waits), its next Lock takes the fast path again.
func TestLockAfterItsHandOffGoesToTheQueueAtOnce(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			var opts []dlock.Option
			if fair {
				opts = append(opts, dlock.WithFair())
			}
			ctx := testenv.Context(t, 60*time.Second)
			name := fmt.Sprintf("turns/%v", fair)
			cfg, err := pgxpool.ParseConfig(srv.URL(srv.Addr, ""))
			if err != nil {
				t.Fatal(err)
			}
			fast := &sqlCounter{}
			cfg.ConnConfig.Tracer = fast
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			d, err := pglock.New(pool)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			a := dlock.New(d, dlock.WithTTL(time.Minute)).Mutex(name, opts...)
			other := newClient(t, srv.URL(srv.Addr, ""))
			b := other.Mutex(name, opts...)

			la, err := a.Lock(ctx) // made the tables and bound the statements
			if err != nil {
				t.Fatal(err)
			}
			sql := pglock.FastAcquireSQL(d)
			fast.sql.Store(&sql)
			type grant struct {
				lease *dlock.Lease
				err   error
			}
			lock := func(m *dlock.Mutex) chan grant {
				ch := make(chan grant, 1)
				go func() {
					l, err := m.Lock(ctx)
					ch <- grant{l, err}
				}()
				return ch
			}
			await := func(ch chan grant) *dlock.Lease {
				t.Helper()
				select {
				case g := <-ch:
					if g.err != nil {
						t.Fatal(g.err)
					}
					return g.lease
				case <-ctx.Done():
					t.Fatal("no grant")
				}
				return nil
			}
			gb := lock(b)
			waitersShown(t, other, name, 1)
			if err := la.Unlock(ctx); err != nil { // hands the lock to b
				t.Fatal(err)
			}
			lb := await(gb)
			before, all := fast.n.Load(), fast.all.Load()
			ga := lock(a)
			waitersShown(t, other, name, 1)
			if n := fast.n.Load() - before; n != 0 {
				t.Errorf("a Lock after a hand-off sent the fast path's statement %d times, want 0 (the lock is held)", n)
			}
			if n := fast.all.Load() - all; n != 1 {
				t.Errorf("a Lock after a hand-off sent %d statements before it was queued, want 1 (joinQueueAloneSQL)", n)
			}
			if err := lb.Unlock(ctx); err != nil { // hands the lock to a
				t.Fatal(err)
			}
			la = await(ga)
			if la.Token() <= lb.Token() {
				t.Errorf("token %d after %d", la.Token(), lb.Token())
			}
			// a hands the lock to b again; b's release frees it, which a's
			// driver does not hear of: a's next Lock tries to join the
			// queue of a lock that is held no longer, changes nothing, and
			// takes the lock by the attempt under the row lock.
			gb = lock(b)
			waitersShown(t, other, name, 1)
			if err := la.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			lb = await(gb)
			if err := lb.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			// lockCounting locks a and counts the times it sent statement.
			lockCounting := func(statement string) (*dlock.Lease, int64) {
				t.Helper()
				fast.sql.Store(&statement)
				before := fast.n.Load()
				l, err := a.Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return l, fast.n.Load() - before
			}
			la, n := lockCounting(pglock.JoinQueueAloneSQL(d))
			if n != 1 {
				t.Errorf("a Lock after a hand-off, of a lock since freed, sent the join's statement %d times, want 1", n)
			}
			if la.Token() <= lb.Token() {
				t.Errorf("token %d after %d", la.Token(), lb.Token())
			}
			if err := la.Unlock(ctx); err != nil { // nobody waits: frees it
				t.Fatal(err)
			}
			la, n = lockCounting(sql)
			if n != 1 {
				t.Errorf("a Lock of a lock its last release freed sent the fast path's statement %d times, want 1", n)
			}
			if err := la.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestContendedLocksOnARepeatableReadServer: on a server whose sessions
// default to REPEATABLE READ (and again SERIALIZABLE), four clients take
// turns on one name, plain and fair, and no Lock or Unlock fails: the statements that run alone
// fail with a serialization failure whenever the name's row changed as
// they waited, which under contention is often, and run again as READ
// COMMITTED (readCommitted). Before they did, most calls here failed.
func TestContendedLocksOnARepeatableReadServer(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	for _, iso := range isolations[1:] {
		var clients []*dlock.Client
		for range 4 {
			clients = append(clients, newClient(t, srv.URL(srv.Addr, iso)))
		}
		for _, fair := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fair=%v", strings.TrimPrefix(iso, "options="), fair), func(t *testing.T) {
				testContendedTurns(t, clients, fmt.Sprintf("turns/%s/%v", iso, fair), fair)
			})
		}
	}
}

// testContendedTurns has clients take 30 turns each on name, holding it
// 1 ms each time, and fails on any error or overlap.
func testContendedTurns(t *testing.T, clients []*dlock.Client, name string, fair bool) {
	ctx := testenv.Context(t, 60*time.Second)
	var opts []dlock.Option
	if fair {
		opts = append(opts, dlock.WithFair())
	}
	var holding atomic.Int32
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c.Mutex(name, opts...)
			for range 30 {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Errorf("Lock: %v", err)
					return
				}
				if holding.Add(1) != 1 {
					t.Errorf("granted while another client held the lock")
				}
				time.Sleep(time.Millisecond)
				holding.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("Unlock: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestRenewalThatWaitedForTheRowsLock: a renewal whose statement waits for
// the lease's row while a transaction writes that row, and commits, still
// renews the lease, on every default isolation level. At REPEATABLE READ
// and SERIALIZABLE the statement fails with a serialization failure once
// the row has changed after its snapshot, and runs again as READ
// COMMITTED (readCommitted); without that, the renewal failed, and the
// portable layer would have lost a lease that was still held. Each way a
// lease is renewed: one lease (extendSQL), several of one TTL in one
// statement (extendManySQL), a semaphore's permit (permitExtendSQL).
func TestRenewalThatWaitedForTheRowsLock(t *testing.T) {
	atEachIsolation(t, testRenewalThatWaited)
}

func testRenewalThatWaited(t *testing.T, srv *testenv.Postgres, iso string) {
	ctx := testenv.Context(t, 60*time.Second)
	d := newDriver(t, srv.URL(srv.Addr, iso))
	pool := newPool(t, srv.URL(srv.Addr, ""))
	acquire := func(name, owner string, limit int) driver.Held {
		t.Helper()
		g, err := d.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: time.Minute, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		return driver.Held{Name: name, Owner: owner, Token: g.Token, Handle: g.Handle}
	}
	// renewed checks that the leases run ten minutes more, by the rows of
	// table.
	renewed := func(table string, held ...driver.Held) {
		t.Helper()
		for _, h := range held {
			var left time.Duration
			if err := pool.QueryRow(ctx, `SELECT (extract(epoch FROM expires_at - clock_timestamp()) * 1e6)::bigint * interval '1 microsecond' FROM `+table+` WHERE name = $1 AND owner = $2`,
				[]byte(h.Name), h.Owner).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if left < 9*time.Minute {
				t.Errorf("%s: %v left after the renewal, want about 10m", h.Name, left)
			}
		}
	}
	one := acquire("renew/one"+iso, "one", 0)
	if err := whileRowsAreWritten(t, ctx, pool, touchLeases, []driver.Held{one}, pglock.ExtendSQL(d), func() error {
		return d.Extend(ctx, one, 10*time.Minute)
	}); err != nil {
		t.Fatalf("renewal that waited for the row: %v, want it renewed", err)
	}
	renewed("dlock_leases", one)
	many := []driver.Held{acquire("renew/many/a"+iso, "a", 0), acquire("renew/many/b"+iso, "b", 0)}
	if err := whileRowsAreWritten(t, ctx, pool, touchLeases, many, pglock.ExtendManySQL(d), func() error {
		b := []driver.Extension{{Held: many[0], TTL: 10 * time.Minute}, {Held: many[1], TTL: 10 * time.Minute}}
		return errors.Join(d.ExtendBatch(ctx, b)...)
	}); err != nil {
		t.Fatalf("batch renewal that waited for the rows: %v, want them renewed", err)
	}
	renewed("dlock_leases", many...)
	permit := acquire("renew/permit"+iso, "p", 2)
	if err := whileRowsAreWritten(t, ctx, pool, `UPDATE dlock_leases_permits SET holder = holder WHERE name = ANY($1)`, []driver.Held{permit}, pglock.PermitExtendSQL(d), func() error {
		return d.Extend(ctx, permit, 10*time.Minute)
	}); err != nil {
		t.Fatalf("permit renewal that waited for the row: %v, want it renewed", err)
	}
	renewed("dlock_leases_permits", permit)
}

// touchLeases writes the lease rows of the names $1, changing nothing.
const touchLeases = `UPDATE dlock_leases SET holder = holder WHERE name = ANY($1)`

// whileRowsAreWritten runs op while a transaction holds the lock of the
// rows of held that update writes, commits once op's statement (sql)
// waits for them, and returns op's error.
func whileRowsAreWritten(t *testing.T, ctx context.Context, pool *pgxpool.Pool, update string, held []driver.Held, sql string, op func() error) error {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	names := make([][]byte, len(held))
	for i, h := range held {
		names[i] = []byte(h.Name)
	}
	if tag, err := tx.Exec(ctx, update, names); err != nil || tag.RowsAffected() != int64(len(held)) {
		t.Fatalf("%s: %v, %v", update, tag, err)
	}
	got := make(chan error, 1)
	go func() { got <- op() }()
	waitsForRowLock(t, ctx, pool, sql)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return <-got
}

// TestSessionReleaseThatWaitedForTheRowsLock: a session lock's release
// (releaseSQL and the advisory unlock, in one round trip) that waits for
// the name's row while a transaction writes it — as a lease-mode client
// queueing for the name does — frees the lock and keeps the connection,
// on every default isolation level. At REPEATABLE READ and SERIALIZABLE
// the release fails with a serialization failure and runs again as READ
// COMMITTED; without that it reported an error and closed the connection.
func TestSessionReleaseThatWaitedForTheRowsLock(t *testing.T) {
	atEachIsolation(t, testSessionReleaseThatWaited)
}

func testSessionReleaseThatWaited(t *testing.T, srv *testenv.Postgres, iso string) {
	ctx := testenv.Context(t, 60*time.Second)
	d := newDriver(t, srv.URL(srv.Addr, iso), pglock.WithSessionLocks())
	pool := newPool(t, srv.URL(srv.Addr, ""))
	name := "session/release" + iso
	g, err := d.Acquire(ctx, driver.Request{Name: name, Owner: "s", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h := driver.Held{Name: name, Owner: "s", Token: g.Token, Handle: g.Handle}
	if err := whileRowsAreWritten(t, ctx, pool, touchLeases, []driver.Held{h}, pglock.ReleaseSQL(d), func() error {
		return d.Release(ctx, h)
	}); err != nil {
		t.Fatalf("release that waited for the row: %v, want it released", err)
	}
	var owner string
	if err := pool.QueryRow(ctx, `SELECT owner FROM dlock_leases WHERE name = $1`, []byte(name)).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if owner != "" {
		t.Errorf("after the release, the row's owner is %q, want it freed", owner)
	}
	if n := pglock.IdleSessionConns(d); n != 1 {
		t.Errorf("%d idle session connections after the release, want the released one kept", n)
	}
}
