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

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/pglock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// modes are the two ways of locking, as sub-benchmarks.
var modes = []struct {
	name string
	opts []pglock.Option
}{
	{"lease", nil},
	{"session", []pglock.Option{pglock.WithSessionLocks()}},
}

// BenchmarkUncontended measures TryLock+Unlock of a free lock against two
// floors on the same pool, run as many times: SELECT 1 (a bare round trip)
// and a one-row upsert (a round trip that commits a write, as acquire and
// release each do), interleaved. roundtrips/op and writes/op are the
// ratios: a lock and an unlock of one statement each would cost 2 of the
// second. driver-writes/op is the same for the driver's Acquire and
// Release alone, without the portable layer; notify-writes is the upsert
// with a pg_notify in the same statement, over the upsert alone: what the
// NOTIFY that every release sends adds to a commit. ns/op counts all
// five.
func BenchmarkUncontended(b *testing.B) {
	srv := testenv.StartPostgres(b)
	srv.Exec(`CREATE TABLE floor (id int PRIMARY KEY, n bigint)`)
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			pool := newPool(b, srv.URL(srv.Addr, ""))
			d, err := pglock.New(pool, m.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			c := dlock.New(d, dlock.WithTTL(10*time.Second))
			ctx := context.Background()
			mu := c.Mutex("uncontended")
			lockUnlock := func() error {
				l, err := mu.TryLock(ctx)
				if err != nil {
					return err
				}
				return l.Unlock(ctx)
			}
			// The same through the driver alone, without the portable layer
			// (holder metadata, renewal goroutine, …).
			req := driver.Request{Name: "uncontended-driver", Owner: "bench", TTL: 10 * time.Second, Holder: []byte(`{"host":"bench"}`)}
			driverOnly := func() error {
				g, err := d.Acquire(ctx, req)
				if err != nil {
					return err
				}
				return d.Release(ctx, driver.Held{Name: req.Name, Owner: req.Owner, Token: g.Token, Handle: g.Handle})
			}
			selectOne := func() error {
				var one int
				return pool.QueryRow(ctx, "SELECT 1").Scan(&one)
			}
			write := func() error {
				_, err := pool.Exec(ctx, "INSERT INTO floor VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET n = floor.n + 1")
				return err
			}
			// The write with a NOTIFY in it, as every release sends one
			// (to the next waiter, or on the table's channel when nobody
			// is queued).
			writeNotify := func() error {
				_, err := pool.Exec(ctx, "WITH u AS (INSERT INTO floor VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET n = floor.n + 1 RETURNING n) SELECT pg_notify('bench_floor', n::text) FROM u")
				return err
			}
			for _, op := range []func() error{lockUnlock, driverOnly, selectOne, write, writeNotify} { // warm up: table, prepared statements
				if err := op(); err != nil {
					b.Fatal(err)
				}
			}
			// Interleaved, so that the load of a busy machine falls on all
			// alike.
			var lock, drv, sel, wr, wn time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, x := range []struct {
					op  func() error
					sum *time.Duration
				}{{lockUnlock, &lock}, {driverOnly, &drv}, {selectOne, &sel}, {write, &wr}, {writeNotify, &wn}} {
					start := time.Now()
					if err := x.op(); err != nil {
						b.Fatal(err)
					}
					*x.sum += time.Since(start)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(sel.Nanoseconds())/float64(b.N), "select1-ns")
			b.ReportMetric(float64(wr.Nanoseconds())/float64(b.N), "write-ns")
			b.ReportMetric(float64(lock)/float64(sel), "roundtrips/op")
			b.ReportMetric(float64(lock)/float64(wr), "writes/op")
			b.ReportMetric(float64(drv)/float64(wr), "driver-writes/op")
			b.ReportMetric(float64(wn)/float64(wr), "notify-writes")
		})
	}
}

// BenchmarkStatements measures, one by one, the statements of an
// uncontended lock and unlock (the fast path, fastAcquireSQL; the release
// for an empty queue, freeSQL; and, for comparison, the hand-off's
// handOffSQL, which every release ran before freeSQL) beside the fenced
// minimum's two statements on the same table (an UPDATE that takes a
// free row with a new token, an owner-checked UPDATE that frees it) and
// SELECT 1, on one pool, interleaved. Each reports its mean time in µs;
// what a statement costs above the fenced minimum's is what its checks
// (the queue, the permits, the row's version) and its NOTIFY cost.
func BenchmarkStatements(b *testing.B) {
	srv := testenv.StartPostgres(b)
	pool := newPool(b, srv.URL(srv.Addr, ""))
	d, err := pglock.New(pool)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	if err := d.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	const name = "statements"
	channel, payload := pglock.Channel(d, name)
	holder := []byte(`{"host":"bench"}`)
	ttl := (10 * time.Second).Microseconds()
	exec := func(sql string, args ...any) func() error {
		return func() error {
			rows, err := pool.Query(ctx, sql, args...)
			if err != nil {
				return err
			}
			n := 0
			for rows.Next() {
				n++
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if n == 0 && !strings.HasPrefix(sql, "UPDATE") {
				return fmt.Errorf("no row from %.40q", sql)
			}
			return nil
		}
	}
	fast := exec(pglock.FastAcquireSQL(d), []byte(name), "o", holder, ttl, channel, payload, true)
	take := exec(`UPDATE dlock_leases SET owner = 'o', token = nextval('dlock_leases_token_seq'), holder = $2,
	expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
WHERE name = $1 AND expires_at <= clock_timestamp() RETURNING token`, []byte(name), holder, ttl)
	free := exec(`UPDATE dlock_leases SET owner = '', holder = NULL, expires_at = '-infinity'
WHERE name = $1 AND owner = 'o' AND expires_at > clock_timestamp()`, []byte(name))
	one := exec("SELECT 1")
	steps := []struct {
		unit string
		op   func() error
		sum  time.Duration
	}{
		{unit: "fast-acquire-µs", op: fast},
		{unit: "free-µs", op: exec(pglock.FreeSQL(d), []byte(name), "o", channel, payload)},
		{unit: "fast-acquire-again-µs", op: fast},
		{unit: "handoff-µs", op: exec(pglock.HandOffSQL(d), []byte(name), "o", channel, payload)},
		{unit: "fenced-take-µs", op: take},
		{unit: "fenced-free-µs", op: free},
		{unit: "select1-µs", op: one},
	}
	if _, err := pool.Exec(ctx, pglock.LockNameSQL(d), []byte(name)); err != nil {
		b.Fatal(err)
	}
	for range 20 { // warm up: prepared statements, plans
		for _, s := range steps {
			if err := s.op(); err != nil {
				b.Fatal(err)
			}
		}
	}
	var token int64
	b.ResetTimer()
	for range b.N {
		for i := range steps {
			start := time.Now()
			if err := steps[i].op(); err != nil {
				b.Fatal(err)
			}
			steps[i].sum += time.Since(start)
		}
	}
	b.StopTimer()
	// Each lock and unlock above took effect: the last take drew a token,
	// and the last free left the row free.
	var owner string
	if err := pool.QueryRow(ctx, `SELECT owner, token FROM dlock_leases WHERE name = $1`, []byte(name)).Scan(&owner, &token); err != nil {
		b.Fatal(err)
	}
	if owner != "" || token < int64(3*b.N) {
		b.Fatalf("after %d rounds the row is held by %q with token %d: a step did not take effect", b.N, owner, token)
	}
	for _, s := range steps {
		b.ReportMetric(float64(s.sum.Microseconds())/float64(b.N), s.unit)
	}
}

// BenchmarkContended has 8 workers, each a client with connections of its
// own, take one lock, hold it 1ms and release it, for a fixed time, in
// each way of waiting: dlock's Lock, plain and fair (lease mode: the
// queue, with hand-off on release), a session lock's Lock, and as the
// incumbents do, TryLock with a 50ms sleep between tries. Side by side in
// the same run it measures the floor: a pair of SELECT 1 round trips on
// one connection, and what time.Sleep(1ms) really takes. It reports
// holder changes/s (grants to a worker other than the last holder),
// grants/s, grants per worker (min, max) and fairness = min ÷ max, and
// the ceiling 1 ÷ (sleep + floor pair) — a hand-off needs at least the
// release and a message to the next holder — with the ratio of holder
// changes/s to it. A grant made while another worker still held the lock
// fails the benchmark.
func BenchmarkContended(b *testing.B) {
	srv := testenv.StartPostgres(b)
	const workers = 8
	window := 3 * time.Second
	for _, m := range []struct {
		name string
		opts []pglock.Option
		lock []dlock.Option
		poll bool
	}{
		{name: "lease/plain"},
		{name: "lease/fair", lock: []dlock.Option{dlock.WithFair()}},
		{name: "session/plain", opts: []pglock.Option{pglock.WithSessionLocks()}},
		{name: "lease/trylock-poll-50ms", poll: true},
	} {
		b.Run(m.name, func(b *testing.B) {
			clients := make([]*dlock.Client, workers)
			for i := range clients {
				clients[i] = dlock.New(newDriver(b, srv.URL(srv.Addr, ""), m.opts...), dlock.WithTTL(10*time.Second))
			}
			name := "contended/" + m.name
			// Warm up: tables, prepared statements, LISTEN connections.
			for _, c := range clients {
				l, err := c.Mutex(name, m.lock...).Lock(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				_ = l.Unlock(context.Background())
			}
			floor := newPool(b, srv.URL(srv.Addr, "pool_max_conns=1"))
			var sum contendedRound
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r := runContended(b, clients, name, m.lock, m.poll, window)
				r.pair = floorPair(b, floor, time.Second)
				r.sleep = sleepLength(time.Second)
				sum.add(r)
			}
			b.StopTimer()
			k := float64(b.N)
			changes := float64(sum.changes) / k / window.Seconds()
			ceiling := 1 / (sum.sleep.Seconds()/k + sum.pair.Seconds()/k)
			b.ReportMetric(changes, "changes/s")
			b.ReportMetric(float64(sum.grants)/k/window.Seconds(), "grants/s")
			b.ReportMetric(float64(sum.minGrants)/k, "min-grants/worker")
			b.ReportMetric(float64(sum.maxGrants)/k, "max-grants/worker")
			b.ReportMetric(sum.fairness/k, "fairness")
			b.ReportMetric(float64(sum.pair.Microseconds())/k, "floor-pair-µs")
			b.ReportMetric(float64(sum.handOff.Microseconds())/float64(max(sum.changes, 1)), "handoff-µs")
			b.ReportMetric(float64(sum.unlock.Microseconds())/float64(max(sum.grants, 1)), "unlock-µs")
			b.ReportMetric(float64(sum.sleep.Microseconds())/k, "sleep-µs")
			b.ReportMetric(ceiling, "ceiling/s")
			b.ReportMetric(changes/ceiling, "×ceiling")
		})
	}
}

// contendedRound is what one round of BenchmarkContended counted.
type contendedRound struct {
	grants, changes      int
	minGrants, maxGrants int
	fairness             float64
	pair, sleep          time.Duration
	handOff, unlock      time.Duration // sums: from an unlock's start to the next worker's grant; unlocks
}

func (s *contendedRound) add(r contendedRound) {
	s.grants += r.grants
	s.changes += r.changes
	s.minGrants += r.minGrants
	s.maxGrants += r.maxGrants
	s.fairness += r.fairness
	s.pair += r.pair
	s.sleep += r.sleep
	s.handOff += r.handOff
	s.unlock += r.unlock
}

// runContended has each client take the lock name in turn for window;
// grants are counted under one mutex, in the order the lock calls return.
func runContended(b testing.TB, clients []*dlock.Client, name string, opts []dlock.Option, poll bool, window time.Duration) contendedRound {
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	var (
		mu      sync.Mutex
		r       contendedRound
		last    = -1
		freed   time.Time // when the last holder began to unlock
		per     = make([]int, len(clients))
		holding atomic.Int32
		wg      sync.WaitGroup
	)
	granted := func(w int) {
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() != nil {
			return // after the round's end: not counted
		}
		r.grants++
		per[w]++
		if w != last {
			r.changes++
			if !freed.IsZero() {
				r.handOff += time.Since(freed)
			}
		}
		last = w
	}
	for w, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c.Mutex(name, opts...)
			for ctx.Err() == nil {
				var l *dlock.Lease
				var err error
				if poll {
					l, err = m.TryLock(ctx)
					if errors.Is(err, dlock.ErrNotAcquired) {
						select {
						case <-ctx.Done():
						case <-time.After(50 * time.Millisecond):
						}
						continue
					}
				} else {
					l, err = m.Lock(ctx)
				}
				if err != nil {
					if ctx.Err() == nil {
						b.Error(err)
					}
					return
				}
				if holding.Add(1) != 1 {
					b.Errorf("worker %d was granted the lock while another held it", w)
				}
				granted(w)
				time.Sleep(time.Millisecond)
				holding.Add(-1)
				mu.Lock()
				freed = time.Now()
				mu.Unlock()
				start := time.Now()
				_ = l.Unlock(context.Background())
				mu.Lock()
				r.unlock += time.Since(start)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r.minGrants, r.maxGrants = per[0], per[0]
	for _, n := range per {
		r.minGrants, r.maxGrants = min(r.minGrants, n), max(r.maxGrants, n)
	}
	if r.maxGrants > 0 {
		r.fairness = float64(r.minGrants) / float64(r.maxGrants)
	}
	return r
}

// floorPair returns the mean time of a pair of SELECT 1 round trips on
// one connection of pool, over d.
func floorPair(b *testing.B, pool *pgxpool.Pool, d time.Duration) time.Duration {
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	var one, n int
	start := time.Now()
	for ; time.Since(start) < d; n++ {
		for range 2 {
			if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
				b.Fatal(err)
			}
		}
	}
	return time.Since(start) / time.Duration(n)
}

// sleepLength returns the mean real length of time.Sleep(time.Millisecond)
// over d.
func sleepLength(d time.Duration) time.Duration {
	n := 0
	start := time.Now()
	for ; time.Since(start) < d; n++ {
		time.Sleep(time.Millisecond)
	}
	return time.Since(start) / time.Duration(n)
}

// BenchmarkRenewals renews 20,000 held leases one statement each against
// batched (driver.BatchExtender), side by side (dlocktest.BenchRenewals).
// Run: go test ./backend/pglock -run '^$' -bench Renewals -benchtime 3x
func BenchmarkRenewals(b *testing.B) {
	srv := testenv.StartPostgres(b)
	d, err := pglock.New(newPool(b, srv.URL(srv.Addr, "")))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	dlocktest.BenchRenewals(b, d, 20000)
}
