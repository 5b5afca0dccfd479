package mysqllock

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// BenchmarkMariaDBVsFloor measures what bench/README.md's scenarios A, B
// and D measure for MariaDB, in one run on one server:
//
//   - Uncontended: Lock+Unlock of a free lock (as bench's workers call it),
//     call by call with the floor — two DO 1 on one database/sql connection.
//     x-floor is the lock's time over the floor's. Beside them, two
//     one-row commits (UPDATEs) on one connection: the least a lock+unlock
//     that writes its grant and its release costs (x-two-commits). And the lock's own
//     two statements, bare: the acquire and the release, prepared on one
//     dedicated connection and sent with the arguments a Lock+Unlock sends,
//     without the driver and the portable layer around them (bare-µs;
//     x-bare is the lock's time over theirs, bare-x-floor theirs over the
//     floor's): what the server's work costs, apart from the client's.
//     bare-fair-µs is the same with a fair Lock's acquire statement (not
//     queued; the release is the same).
//     stmts/op is what the
//     server was sent per Lock+Unlock (the Questions counter, every
//     connection of the driver's pool and its bell connection included),
//     fsyncs/op its redo-log flushes (Innodb_data_fsyncs).
//   - Contended8Hold1ms: 8 workers, each with its own client and pool, on
//     one name, each holding it 1 ms per grant, for 2 s per iteration:
//     grants/s, holder changes/s (grants to a different worker than the
//     previous grant), the least and most grants of one worker, and their
//     ratio (fairness); stmts/grant and fsyncs/grant are the server's
//     counters over the whole iteration (its warm-up and wind-down
//     included) per counted grant. Contended8Hold1msFair: the same with
//     dlock.WithFair.
//
// The server runs as bench's does (bench/results_test.go's mariadbArgs):
// the log written at each commit and flushed once a second, so that the
// figures are the round trips and the server's work, not a disk's flush.
//
// Run: go test ./backend/mysqllock -run '^$' -bench MariaDBVsFloor -benchtime 3x
func BenchmarkMariaDBVsFloor(b *testing.B) {
	s := server{testenv.StartMariaDBWith(b, "--innodb-flush-log-at-trx-commit=0", "--sync-binlog=0")}

	b.Run("Uncontended", func(b *testing.B) {
		c := dlock.New(s.open(b, s.Addr, ""), dlock.WithTTL(8*time.Second))
		ctx := context.Background()
		m := c.Mutex("bench/floor/uncontended")
		floor := s.sqlDB(b)
		floor.SetMaxOpenConns(1)
		lockUnlock := func() {
			l, err := m.Lock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
		twoDo := func() {
			for range 2 {
				if _, err := floor.ExecContext(ctx, "DO 1"); err != nil {
					b.Fatal(err)
				}
			}
		}
		commits := s.sqlDB(b)
		commits.SetMaxOpenConns(1)
		for _, q := range []string{"CREATE TABLE IF NOT EXISTS bench_commit (id INT PRIMARY KEY, n BIGINT) ENGINE=InnoDB", "INSERT IGNORE INTO bench_commit VALUES (1, 0)"} {
			if _, err := commits.Exec(q); err != nil {
				b.Fatal(err)
			}
		}
		commit, err := commits.Prepare("UPDATE bench_commit SET n = n + 1 WHERE id = ?")
		if err != nil {
			b.Fatal(err)
		}
		defer commit.Close()
		twoCommits := func() {
			for range 2 {
				if _, err := commit.ExecContext(ctx, 1); err != nil {
					b.Fatal(err)
				}
			}
		}
		d := s.open(b, s.Addr, "")
		if err := d.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		bareConn, err := d.db.Conn(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer bareConn.Close()
		bareAcquire, err := bareConn.PrepareContext(ctx, d.q.acquire)
		if err != nil {
			b.Fatal(err)
		}
		defer bareAcquire.Close()
		bareRelease, err := bareConn.PrepareContext(ctx, d.q.release)
		if err != nil {
			b.Fatal(err)
		}
		defer bareRelease.Close()
		bareAcquireFair, err := bareConn.PrepareContext(ctx, d.q.acquireFair)
		if err != nil {
			b.Fatal(err)
		}
		defer bareAcquireFair.Close()
		bareName := "bench/floor/bare"
		holder := []byte(`{"host":"bench","pid":1,"acquired_at":"2026-12-06T00:00:00Z"}`)
		// pair sends an acquire (its arguments, from the owner) and the
		// plain release; bare is a plain Lock's, bareFair a fair one's
		// (tryFair's statement, not queued: a fair lease released before
		// its bell is taken is released by the plain statement).
		name, ttl := []byte(bareName), micros(8*time.Second)
		pair := func(acquire *sql.Stmt, args func(owner string) []any) func() {
			return func() {
				owner := driver.NewNonce()
				if _, err := acquire.ExecContext(ctx, args(owner)...); err != nil {
					b.Fatal(err)
				}
				rargs := appendSlots(nil, DefaultTable, bareName)
				if _, err := bareRelease.ExecContext(ctx, append(rargs, name, owner)...); err != nil {
					b.Fatal(err)
				}
			}
		}
		bare := pair(bareAcquire, func(owner string) []any {
			args := appendSlots([]any{name, owner, holder, nil, ttl}, DefaultTable, bareName)
			return append(args, owner, holder, nil, ttl)
		})
		bareFair := pair(bareAcquireFair, func(owner string) []any {
			return []any{name, owner, holder, nil, ttl, name, int64(notQueued), int64(notQueued), owner, holder, nil, ttl}
		})
		for range 50 { // warm: table, statements, connections
			lockUnlock()
			twoDo()
			twoCommits()
			bare()
			bareFair()
		}
		time.Sleep(50 * time.Millisecond) // the bell keeper catches up
		const counted = 200
		q0, f0 := serverCounter(b, floor, "Questions"), serverCounter(b, floor, "Innodb_data_fsyncs")
		for range counted {
			lockUnlock()
		}
		time.Sleep(50 * time.Millisecond)
		// Two SHOW STATUS statements of ours fall between the readings.
		q1, f1 := serverCounter(b, floor, "Questions")-2, serverCounter(b, floor, "Innodb_data_fsyncs")

		// They take turns call by call, in a rotating order, so that a
		// burst of load on the machine lands on all of them.
		cases := []func(){lockUnlock, twoDo, twoCommits, bare, bareFair}
		spent := make([]time.Duration, len(cases))
		i := 0
		for b.Loop() {
			for j := range cases {
				k := (i + j) % len(cases)
				t0 := time.Now()
				cases[k]()
				spent[k] += time.Since(t0)
			}
			i++
		}
		lock, fl, cm, br, bf := spent[0], spent[1], spent[2], spent[3], spent[4]
		n := float64(b.N)
		b.ReportMetric(float64(lock.Microseconds())/n, "lock+unlock-µs")
		b.ReportMetric(float64(fl.Microseconds())/n, "floor-µs")
		b.ReportMetric(float64(cm.Microseconds())/n, "two-commits-µs")
		b.ReportMetric(float64(br.Microseconds())/n, "bare-µs")
		b.ReportMetric(float64(bf.Microseconds())/n, "bare-fair-µs")
		b.ReportMetric(float64(lock)/float64(fl), "x-floor")
		b.ReportMetric(float64(lock)/float64(cm), "x-two-commits")
		b.ReportMetric(float64(lock)/float64(br), "x-bare")
		b.ReportMetric(float64(br)/float64(fl), "bare-x-floor")
		b.ReportMetric(float64(q1-q0)/counted, "stmts/op")
		b.ReportMetric(float64(f1-f0)/counted, "fsyncs/op")
	})

	b.Run("Contended8Hold1ms", func(b *testing.B) { contendedVsFloor(b, s) })
	b.Run("Contended8Hold1msFair", func(b *testing.B) { contendedVsFloor(b, s, dlock.WithFair()) })
}

// contendedVsFloor is scenario B: 8 workers, one name, 1 ms held.
func contendedVsFloor(b *testing.B, s server, opts ...dlock.Option) {
	{
		const workers = 8
		clients := make([]*dlock.Client, workers)
		for i := range clients {
			clients[i] = dlock.New(s.open(b, s.Addr, ""), append([]dlock.Option{dlock.WithTTL(8 * time.Second)}, opts...)...)
		}
		var total time.Duration
		var grants, changes int
		perWorker := make([]int, workers)
		round := 0
		db := s.sqlDB(b)
		q0, f0 := serverCounter(b, db, "Questions"), serverCounter(b, db, "Innodb_data_fsyncs")
		for b.Loop() {
			name := fmt.Sprintf("bench/floor/contended/%d", round)
			g, ch, pw, took := contendedRound(b, clients, name, 2*time.Second, time.Millisecond)
			grants, changes, total = grants+g, changes+ch, total+took
			for i := range pw {
				perWorker[i] += pw[i]
			}
			round++
		}
		q1, f1 := serverCounter(b, db, "Questions"), serverCounter(b, db, "Innodb_data_fsyncs")
		b.ReportMetric(float64(q1-q0)/float64(max(grants, 1)), "stmts/grant")
		b.ReportMetric(float64(f1-f0)/float64(max(grants, 1)), "fsyncs/grant")
		lo, hi := perWorker[0], perWorker[0]
		for _, g := range perWorker {
			lo, hi = min(lo, g), max(hi, g)
		}
		b.ReportMetric(float64(grants)/total.Seconds(), "grants/s")
		b.ReportMetric(float64(changes)/total.Seconds(), "changes/s")
		b.ReportMetric(float64(changes)/float64(max(grants, 1)), "changes/grant")
		b.ReportMetric(float64(lo), "min-grants")
		b.ReportMetric(float64(hi), "max-grants")
		b.ReportMetric(float64(lo)/float64(max(hi, 1)), "fairness")
	}
}

// contendedRound has every client Lock, hold for hold, and Unlock name in a
// loop for d (after a 0.5 s warm-up, not counted), and counts the grants,
// the holder changes among them, and each worker's grants. A grant while
// another worker holds the lock fails the benchmark.
func contendedRound(b *testing.B, clients []*dlock.Client, name string, d, hold time.Duration) (grants, changes int, perWorker []int, took time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	perWorker = make([]int, len(clients))
	last, holding := -1, -1
	counting := false
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c.Mutex(name)
			for ctx.Err() == nil {
				l, err := m.Lock(ctx)
				if err != nil {
					if ctx.Err() == nil {
						b.Error(err)
					}
					return
				}
				mu.Lock()
				if holding != -1 {
					b.Errorf("worker %d granted while worker %d holds", i, holding)
				}
				holding = i
				if counting && ctx.Err() == nil {
					grants++
					perWorker[i]++
					if last != i {
						changes++
					}
				}
				last = i
				mu.Unlock()
				time.Sleep(hold)
				mu.Lock()
				holding = -1
				mu.Unlock()
				if err := l.Unlock(context.Background()); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	counting = true
	mu.Unlock()
	start := time.Now()
	time.Sleep(d)
	mu.Lock()
	counting = false
	took = time.Since(start)
	mu.Unlock()
	cancel()
	wg.Wait()
	return grants, changes, perWorker, took
}

func serverCounter(b *testing.B, db *sql.DB, name string) int64 {
	var k string
	var v int64
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE '"+name+"'").Scan(&k, &v); err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	return v
}
