package temporallock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/internal/testenv"
)

// BenchmarkTemporal measures, against one dev server in one run: the floor
// of one workflow update round trip (an update the mutex workflow answers at
// once), uncontended Lock+Unlock, and hand-offs per second with 8 clients
// contending for one name, and with 32, in both modes.
//
//	go test ./backend/temporallock -run '^$' -bench Temporal -benchtime 200x
func BenchmarkTemporal(b *testing.B) {
	srv := startServer(b)
	ctx := context.Background()

	b.Run("UpdateRoundTrip", func(b *testing.B) {
		d := srv.open(b, "")
		name := "bench/floor"
		l, err := dlock.New(d, dlock.WithTTL(30*time.Second)).Mutex(name).Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Unlock(ctx)
		b.ResetTimer()
		for b.Loop() {
			// Answered at once (not the holder): one update, no state change.
			if _, err := d.update(ctx, name, "", updExtend, extendReq{Owner: "bench"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, mode := range []Mode{ModeFair, ModeID} {
		b.Run(fmt.Sprintf("%s/Uncontended", mode), func(b *testing.B) {
			c := dlock.New(srv.open(b, "", WithMode(mode)), dlock.WithTTL(30*time.Second))
			m := c.Mutex("bench/uncontended")
			for b.Loop() {
				l, err := m.Lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, workers := range []int{8, 32} {
			b.Run(fmt.Sprintf("%s/Contended%d", mode, workers), func(b *testing.B) { benchContended(b, srv, mode, workers) })
		}
	}
}

// benchContended: workers clients, each its own driver (as a process
// would have), take turns on one name with nothing held in between.
// More than 10 waiters exceed the server's default of in-flight updates
// per workflow, which the fair mode keeps within (see the package doc).
// Reported besides hand-offs: updates (and updates-with-start) sent per
// grant, and how many failed — refused for the in-flight limit, or aborted
// by the server — and were retried by the SDK. All workers start at once,
// so a few arrivals can be refused at the start.
func benchContended(b *testing.B, srv server, mode Mode, workers int) {
	ctx := context.Background()
	var updates updateCounter
	cs := make([]*dlock.Client, workers)
	for i := range cs {
		cs[i] = dlock.New(srv.openDial(b, "", updates.dialOptions(), WithMode(mode)), dlock.WithTTL(30*time.Second))
	}
	name := fmt.Sprintf("bench/contended/%d/%d", workers, b.N)
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := cs[i].Mutex(name)
			for left.Add(-1) >= 0 {
				l, err := m.Lock(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if err := l.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "handoffs/s")
	b.ReportMetric(float64(updates.calls.Load())/float64(b.N), "updates/grant")
	b.ReportMetric(float64(updates.failed.Load()), "failed-updates")
}

// BenchmarkBurst measures bursts of arrivals: 32 clients, each with a
// driver of its own (as a process would have), send Lock for one name at
// the same instant, hold it 1ms and unlock it; b.N bursts, one after the
// other. Once on a server with the default limit of updates in flight on
// one workflow (history.maxInFlightUpdates, 10), once on one with 64: a
// refused update aborts the others in flight ("Many waiters" in the
// package doc). Reported: seconds per burst, the updates refused or
// aborted (and retried by the SDK) per burst, and the Locks sent as
// updates per burst (the first burst's all are; later, a process whose
// replies counted a crowded queue queues by signal).
//
//	go test ./backend/temporallock -run '^$' -bench Burst -benchtime 3x
func BenchmarkBurst(b *testing.B) {
	for _, limit := range []int{10, 64} {
		b.Run(fmt.Sprintf("maxInFlightUpdates=%d", limit), func(b *testing.B) {
			srv := startServer(b, fmt.Sprintf("history.maxInFlightUpdates=%d", limit))
			var updates updateCounter
			clients := burstClients(b, srv, 32, &updates)
			// Bounded: a storm must end the benchmark with an error, not hang it.
			ctx := testenv.Context(b, time.Duration(b.N)*2*time.Minute)
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				overlaps, errs := burst(ctx, clients, "bench/burst")
				if overlaps > 0 || len(errs) > 0 {
					b.Fatalf("burst %d: %d overlaps, errors %v", i, overlaps, errs)
				}
			}
			b.ReportMetric(time.Since(start).Seconds()/float64(b.N), "s/burst")
			b.ReportMetric(float64(updates.failed.Load())/float64(b.N), "failed-updates/burst")
			b.ReportMetric(float64(updates.acquires.Load())/float64(b.N), "acquire-updates/burst")
		})
	}
}
