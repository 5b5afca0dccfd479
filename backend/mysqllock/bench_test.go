package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/internal/testenv"
)

// BenchmarkMariaDB measures, against one server in one run, with the
// compared cases interleaved so that a busy machine weighs on all alike:
//
//   - Uncontended: TryLock+Unlock of a free lock against two floors on the
//     same pool: a SELECT 1 round trip (x-select1), and a durable one-row
//     UPDATE, the cost of one InnoDB commit (x-commit). Acquire and release
//     are one commit each, so x-commit is about 2.
//   - Contended: 8 clients (each its own pool and bell connection, as
//     separate processes have) on one key, each handing the lock on: after
//     its Unlock a client waits until another has been granted before it
//     asks again, so every grant is a hand-off to a client that was waiting.
//     Hand-offs per second with the bells (Lock) and with a poll-and-sleep
//     loop of the same statements (TryLock, sleep, retry), as lock libraries
//     without a server-side wait do; x-poll is the ratio. unlock-to-grant is
//     the time from a holder's Unlock returning to the next grant;
//     stmts/handoff is the server's work per hand-off, attempts/handoff
//     the acquire attempts (INSERTs) among it. ContendedHolding100ms is the same with
//     each holder keeping the lock 100 ms on average: what polling costs
//     while waiting.
//     ContendedPairHolding20ms: 2 clients, each holding 20 ms on average, so
//     that the other always waits: unlock-to-grant is the wake-up latency.
//
// Run: go test ./backend/mysqllock -run '^$' -bench MariaDB/Uncontended -benchtime 200x
// and: go test ./backend/mysqllock -run '^$' -bench MariaDB/Contended -benchtime 3x
func BenchmarkMariaDB(b *testing.B) {
	s := server{testenv.StartMariaDB(b)}

	b.Run("Uncontended", func(b *testing.B) {
		d := s.open(b, s.Addr, "")
		c := dlock.New(d, dlock.WithTTL(10*time.Second))
		ctx := context.Background()
		m := c.Mutex("bench/uncontended")
		warm, err := m.TryLock(ctx) // table, statements and bell connection ready
		if err != nil {
			b.Fatal(err)
		}
		if err := warm.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := d.db.Exec("CREATE TABLE IF NOT EXISTS bench_floor (id INT PRIMARY KEY, n BIGINT) ENGINE=InnoDB"); err != nil {
			b.Fatal(err)
		}
		if _, err := d.db.Exec("INSERT IGNORE INTO bench_floor VALUES (1, 0)"); err != nil {
			b.Fatal(err)
		}
		commit, err := d.db.Prepare("UPDATE bench_floor SET n = n + 1 WHERE id = ?")
		if err != nil {
			b.Fatal(err)
		}
		defer commit.Close()
		var lock, sel, upd time.Duration
		var one int
		for b.Loop() {
			t0 := time.Now()
			l, err := m.TryLock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := d.db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			if _, err := commit.ExecContext(ctx, 1); err != nil {
				b.Fatal(err)
			}
			lock, sel, upd = lock+t1.Sub(t0), sel+time.Since(t1)-time.Since(t2), upd+time.Since(t2)
		}
		n := float64(b.N)
		b.ReportMetric(float64(lock.Microseconds())/n, "lock+unlock-µs")
		b.ReportMetric(float64(sel.Microseconds())/n, "select1-µs")
		b.ReportMetric(float64(upd.Microseconds())/n, "commit-µs")
		b.ReportMetric(float64(lock)/float64(sel), "x-select1")
		b.ReportMetric(float64(lock)/float64(upd), "x-commit")
	})

	b.Run("Contended", func(b *testing.B) { contended(b, s, 8, 0, 40) })
	b.Run("ContendedHolding100ms", func(b *testing.B) { contended(b, s, 8, 100*time.Millisecond, 10) })
	b.Run("ContendedPairHolding20ms", func(b *testing.B) { contended(b, s, 2, 20*time.Millisecond, 20) })
}

// contended runs the hand-off rounds of every mode, interleaved, among
// workers clients; each holder keeps the lock for hold before it hands it
// on.
func contended(b *testing.B, s server, workers int, hold time.Duration, perRound int) {
	clients := make([]*dlock.Client, workers)
	for i := range clients {
		clients[i] = dlock.New(s.open(b, s.Addr, ""), dlock.WithTTL(10*time.Second))
	}
	modes := []struct {
		name string
		poll time.Duration // 0: Lock, woken by the bell
	}{
		{"bells", 0},
		{"poll-10ms", 10 * time.Millisecond},
		{"poll-100ms", 100 * time.Millisecond},
	}
	db := s.sqlDB(b)
	spent := make([]time.Duration, len(modes))
	gaps := make([]time.Duration, len(modes))
	stmts := make([]int64, len(modes))
	attempts := make([]int64, len(modes))
	round := 0
	for b.Loop() {
		for i, mode := range modes {
			name := fmt.Sprintf("bench/contended/%s/%d", mode.name, round)
			before, triedBefore := statements(b, db, allStatements...), statements(b, db, "Com_insert")
			took, gap := handOffs(b, clients, name, perRound, mode.poll, hold)
			spent[i] += took
			gaps[i] += gap
			stmts[i] += statements(b, db, allStatements...) - before
			attempts[i] += statements(b, db, "Com_insert") - triedBefore
		}
		round++
	}
	rate := func(i int) float64 { return float64(round*perRound) / spent[i].Seconds() }
	for i, mode := range modes {
		b.ReportMetric(rate(i), mode.name+"-handoffs/s")
		b.ReportMetric(float64(gaps[i].Microseconds())/float64(round*(perRound-1)), mode.name+"-unlock-to-grant-µs")
		b.ReportMetric(float64(stmts[i])/float64(round*perRound), mode.name+"-stmts/handoff")
		b.ReportMetric(float64(attempts[i])/float64(round*perRound), mode.name+"-attempts/handoff")
	}
	b.ReportMetric(rate(0)/rate(1), "x-poll-10ms")
	b.ReportMetric(rate(0)/rate(2), "x-poll-100ms")
}

// handOffs has the clients pass the lock name among themselves n times,
// each holding it for about hold, and returns how long that took and the
// sum of the times from an Unlock's return to the next grant. A client that released waits for another's
// grant before it asks again.
func handOffs(b *testing.B, clients []*dlock.Client, name string, n int, poll, hold time.Duration) (took, gaps time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	grants, holder := 0, -1
	var unlocked time.Time // when the last holder's Unlock returned
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c.Mutex(name)
			for {
				mu.Lock()
				for holder == i && grants < n { // hand on: wait for another's grant
					cond.Wait()
				}
				done := grants >= n
				mu.Unlock()
				if done {
					return
				}
				l, err := lockOrPoll(ctx, m, poll)
				if err != nil {
					if ctx.Err() == nil {
						b.Error(err)
					}
					return // the round is over
				}
				mu.Lock()
				if holder == i {
					b.Error("a client was granted twice in a row")
				}
				if !unlocked.IsZero() {
					gaps += time.Since(unlocked)
					unlocked = time.Time{}
				}
				grants, holder = grants+1, i
				last := grants >= n
				cond.Broadcast()
				mu.Unlock()
				// Hold for hold on average, spread so that the hand-offs do
				// not fall into step with a poll interval.
				time.Sleep(hold/2 + rand.N(hold+1))
				if err := l.Unlock(context.Background()); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				if holder == i {
					unlocked = time.Now()
				}
				mu.Unlock()
				if last {
					cancel() // let go of those still waiting
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), gaps
}

// lockOrPoll takes m with Lock (poll == 0) or by TryLock and sleeping poll
// between tries.
func lockOrPoll(ctx context.Context, m *dlock.Mutex, poll time.Duration) (*dlock.Lease, error) {
	if poll == 0 {
		return m.Lock(ctx)
	}
	for {
		l, err := m.TryLock(ctx)
		if !errors.Is(err, dlock.ErrNotAcquired) {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// allStatements are the statements the driver runs.
var allStatements = []string{"Com_select", "Com_insert", "Com_update", "Com_kill"}

// statements sums the server's counters of the given statements (prepared
// or not). Every acquire attempt is an INSERT, and nothing else is, so
// Com_insert counts the attempts.
func statements(b *testing.B, db *sql.DB, counters ...string) int64 {
	var total int64
	rows, err := db.Query("SHOW GLOBAL STATUS WHERE Variable_name IN ('" + strings.Join(counters, "', '") + "')")
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var v int64
		if err := rows.Scan(&k, &v); err != nil {
			b.Fatal(err)
		}
		total += v
	}
	return total
}

// BenchmarkRenewals renews 20,000 held leases one statement each against
// batched (driver.BatchExtender), side by side (dlocktest.BenchRenewals).
// Run: go test ./backend/mysqllock -run '^$' -bench Renewals -benchtime 3x
func BenchmarkRenewals(b *testing.B) {
	s := server{testenv.StartMariaDB(b)}
	dlocktest.BenchRenewals(b, s.open(b, s.Addr, ""), 20000)
}

// BenchmarkGetLockCostByLocksHeld measures what bounds the bells a Driver
// holds for leases nobody waited for (maxQuietBells): the time of one
// GET_LOCK on a session that already holds 0, 1,000, 10,000 and 40,000
// user locks, 1,000 GET_LOCKs in one statement at each step. On MariaDB
// it grows with the locks held (the package doc gives figures).
// Run: go test ./backend/mysqllock -run '^$' -bench GetLockCost -benchtime 1x
func BenchmarkGetLockCostByLocksHeld(b *testing.B) {
	s := server{testenv.StartMariaDB(b)}
	db := s.sqlDB(b)
	ctx := context.Background()
	for b.Loop() {
		conn, err := db.Conn(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{0, 1000, 10000, 40000} {
			if n > 0 {
				if _, err := conn.ExecContext(ctx, fmt.Sprintf("DO (SELECT COUNT(GET_LOCK(CONCAT('bench:held:', seq), 0)) FROM seq_1_to_%d)", n)); err != nil {
					b.Fatal(err)
				}
			}
			start := time.Now()
			if _, err := conn.ExecContext(ctx, "DO (SELECT COUNT(GET_LOCK(CONCAT('bench:probe:', seq), 0)) FROM seq_1_to_1000)"); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000, fmt.Sprintf("µs/GET_LOCK@%d", n))
			if _, err := conn.ExecContext(ctx, "DO RELEASE_ALL_LOCKS()"); err != nil {
				b.Fatal(err)
			}
		}
		discard(conn)
	}
}
