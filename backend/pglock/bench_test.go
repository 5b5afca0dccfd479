package pglock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/pglock"
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
// Release alone, without the portable layer. ns/op counts all four.
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
			for _, op := range []func() error{lockUnlock, driverOnly, selectOne, write} { // warm up: table, prepared statements
				if err := op(); err != nil {
					b.Fatal(err)
				}
			}
			// Interleaved, so that the load of a busy machine falls on all
			// three alike.
			var lock, drv, sel, wr time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, x := range []struct {
					op  func() error
					sum *time.Duration
				}{{lockUnlock, &lock}, {driverOnly, &drv}, {selectOne, &sel}, {write, &wr}} {
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
		})
	}
}

// BenchmarkContended has 8 workers take one lock, hold it 1ms and release
// it, for a fixed time, twice: waiting with dlock's Lock (woken by NOTIFY),
// and as the incumbents do, TryLock with a 50ms sleep between tries. It
// reports grants and hand-offs (grants to a worker other than the last
// holder) per second of each, and the ratio of hand-offs.
func BenchmarkContended(b *testing.B) {
	srv := testenv.StartPostgres(b)
	const workers = 8
	window := 3 * time.Second
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			clients := make([]*dlock.Client, workers)
			for i := range clients {
				clients[i] = dlock.New(newDriver(b, srv.URL(srv.Addr, ""), m.opts...), dlock.WithTTL(10*time.Second))
			}
			run := func(poll bool) (grants, handoffs float64) {
				ctx, cancel := context.WithTimeout(context.Background(), window)
				defer cancel()
				deadline, _ := ctx.Deadline()
				var n, h atomic.Int64
				var last atomic.Int64
				var wg sync.WaitGroup
				for w, c := range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						mu := c.Mutex("contended")
						for ctx.Err() == nil {
							var l *dlock.Lease
							var err error
							if poll {
								l, err = mu.TryLock(ctx)
								if errors.Is(err, dlock.ErrNotAcquired) {
									select {
									case <-ctx.Done():
									case <-time.After(50 * time.Millisecond):
									}
									continue
								}
							} else {
								l, err = mu.Lock(ctx)
							}
							if err != nil {
								if time.Until(deadline) > 100*time.Millisecond {
									b.Error(err)
								}
								return
							}
							n.Add(1)
							if last.Swap(int64(w)) != int64(w) {
								h.Add(1)
							}
							time.Sleep(time.Millisecond)
							_ = l.Unlock(context.Background())
						}
					}()
				}
				wg.Wait()
				return float64(n.Load()) / window.Seconds(), float64(h.Load()) / window.Seconds()
			}
			b.ResetTimer()
			var ng, nh, pg, ph float64
			for i := 0; i < b.N; i++ {
				g, h := run(false)
				ng, nh = ng+g, nh+h
				g, h = run(true)
				pg, ph = pg+g, ph+h
			}
			k := float64(b.N)
			b.ReportMetric(ng/k, "notify-grants/s")
			b.ReportMetric(nh/k, "notify-handoffs/s")
			b.ReportMetric(pg/k, "poll-grants/s")
			b.ReportMetric(ph/k, "poll-handoffs/s")
			b.ReportMetric(nh/ph, "handoff-ratio")
		})
	}
}
