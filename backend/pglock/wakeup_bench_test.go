package pglock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock/dlock/internal/testenv"
)

// BenchmarkWakeUp measures the wake-up of a contended hand-off alone,
// outside the driver: 8 workers pass a turn around a ring, each holding it
// for hold, and each pass is a release that changes a row (as handOffSQL
// does) and wakes exactly the next worker, in one of two ways:
//
//   - notify: the release's statement sends pg_notify on the next worker's
//     own channel; every worker LISTENs on a connection of its own (as
//     every pglock Driver does), so the server signals all 8 listening
//     backends at each NOTIFY, whatever the channel.
//   - advisory: every worker holds an advisory lock of its own (its bell)
//     on a connection of its own; the next worker blocks in
//     pg_advisory_lock of the holder's bell on a third connection, in a
//     pipeline that then reads the row (a fresh snapshot, after the
//     wait) and gives the bell back; the release commits the row change
//     and then drops its bell, in one round trip. Only the backend that
//     waits on that bell is woken. A worker takes its bell as its turn
//     begins, within the hold (so with hold=0 a pass also pays that round
//     trip). The workers still LISTEN (idle), as a driver that keeps
//     NOTIFY for other wake-ups would.
//
// It tells whether waking waiters by an advisory lock's release would
// make hand-offs faster than NOTIFY: only if advisory's ns/op comes out
// below notify's.
//
// ns/op is the time per pass; overhead-ns is that minus the hold as
// time.Sleep really takes it.
func BenchmarkWakeUp(b *testing.B) {
	srv := testenv.StartPostgres(b)
	srv.Exec(`CREATE TABLE chain (id int PRIMARY KEY, n bigint); INSERT INTO chain VALUES (1, 0)`)
	url := srv.URL(srv.Addr, "")
	for _, hold := range []time.Duration{0, time.Millisecond} {
		for _, how := range []string{"notify", "advisory"} {
			b.Run(fmt.Sprintf("%s/hold=%s", how, hold), func(b *testing.B) {
				ring := newWakeRing(b, url, 8)
				defer ring.close()
				sleep := time.Duration(0)
				if hold > 0 {
					sleep = sleepLength(hold)
				}
				b.ResetTimer()
				start := time.Now()
				ring.run(b, how, hold, b.N)
				elapsed := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64((elapsed/time.Duration(b.N))-sleep), "overhead-ns")
			})
		}
	}
}

type wakeRing struct {
	url    string
	listen []*pgx.Conn // LISTEN w<i>
	work   []*pgx.Conn // notify: the release; advisory: the bell (the release runs on it)
	wait   []*pgx.Conn // advisory: the wait
}

func newWakeRing(b *testing.B, url string, n int) *wakeRing {
	ctx := context.Background()
	r := &wakeRing{url: url}
	conn := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	for i := 0; i < n; i++ {
		l := conn()
		if _, err := l.Exec(ctx, fmt.Sprintf("LISTEN w%d", i)); err != nil {
			b.Fatal(err)
		}
		r.listen = append(r.listen, l)
		r.work = append(r.work, conn())
		r.wait = append(r.wait, conn())
	}
	return r
}

func (r *wakeRing) close() {
	for _, cs := range [][]*pgx.Conn{r.listen, r.work, r.wait} {
		for _, c := range cs {
			c.Close(context.Background())
		}
	}
}

// bell is worker i's advisory lock key.
func bell(i int) int64 { return 7_000_000 + int64(i) }

// run passes the turn passes times around the ring.
func (r *wakeRing) run(b *testing.B, how string, hold time.Duration, passes int) {
	n := len(r.work)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		left    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		runErr  error
	)
	left.Store(int64(passes))
	fail := func(err error) {
		if ctx.Err() == nil {
			errOnce.Do(func() { runErr = err })
		}
		cancel()
	}
	// A pass: hold, then release and wake the next worker. It returns
	// false when the run is over.
	pass := func(i int, hold time.Duration) bool {
		if hold > 0 {
			time.Sleep(hold)
		}
		last := left.Add(-1) <= 0
		next := (i + 1) % n
		var err error
		switch how {
		case "notify":
			_, err = r.work[i].Exec(ctx, fmt.Sprintf(
				`WITH u AS (UPDATE chain SET n = n + 1 WHERE id = 1 RETURNING n) SELECT pg_notify('w%d', n::text) FROM u`, next))
		case "advisory":
			_, err = r.work[i].Exec(ctx, fmt.Sprintf(
				`BEGIN; UPDATE chain SET n = n + 1 WHERE id = 1; COMMIT; SELECT pg_advisory_unlock(%d)`, bell(i)),
				pgx.QueryExecModeSimpleProtocol)
		}
		if err != nil {
			fail(err)
			return false
		}
		if last {
			cancel()
			return false
		}
		return true
	}
	switch how {
	case "notify":
		// Worker 0 starts with the turn; the message waits on its LISTEN
		// connection until it reads it.
		if _, err := r.work[n-1].Exec(ctx, `SELECT pg_notify('w0', '')`); err != nil {
			b.Fatal(err)
		}
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				for {
					if _, err := r.listen[i].WaitForNotification(ctx); err != nil {
						fail(err)
						return
					}
					if !pass(i, hold) {
						return
					}
				}
			}(i)
		}
	case "advisory":
		// A worker takes its bell when its turn begins and drops it in its
		// release, as a holder would; held[i] gets a value once worker i
		// holds its bell, so that its successor waits only on a held bell
		// (a bell is taken again only a whole round later, after the
		// successor's turn).
		held := make([]chan struct{}, n)
		for i := range held {
			held[i] = make(chan struct{}, 1)
		}
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				prev := (i + n - 1) % n
				first := i == 0
				for {
					if !first {
						select {
						case <-held[prev]:
						case <-ctx.Done():
							return
						}
						bt := &pgx.Batch{}
						bt.Queue(fmt.Sprintf(`SELECT pg_advisory_lock(%d)`, bell(prev)))
						bt.Queue(`SELECT n FROM chain WHERE id = 1`)
						bt.Queue(fmt.Sprintf(`SELECT pg_advisory_unlock(%d)`, bell(prev)))
						if err := r.wait[i].SendBatch(ctx, bt).Close(); err != nil {
							fail(err)
							return
						}
					}
					first = false
					// The turn began: take the bell (within the hold, as a
					// holder's bell is taken beside its critical section).
					t0 := time.Now()
					if _, err := r.work[i].Exec(ctx, fmt.Sprintf(`SELECT pg_advisory_lock(%d)`, bell(i))); err != nil {
						fail(err)
						return
					}
					held[i] <- struct{}{}
					if !pass(i, hold-time.Since(t0)) {
						return
					}
				}
			}(i)
		}
	}
	wg.Wait()
	if runErr != nil {
		b.Fatal(runErr)
	}
	// Leave the connections clean for the next run: no bell held.
	for _, c := range r.work {
		_, _ = c.Exec(context.Background(), `SELECT pg_advisory_unlock_all()`)
	}
}
