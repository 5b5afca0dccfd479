package etcdlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlock/dlock"
)

// The benchmarks run dlock over etcdlock next to etcd's own
// concurrency.Mutex, on one embedded server, so their ratio is measured
// side by side:
//
//	go test -run '^$' -bench . -benchtime 3s ./backend/etcdlock/
//
// Uncontended: one client locks and unlocks one name in a loop (the
// concurrency.Mutex reuses one session, as its users do).
// Contended: 8 clients, each with its own etcd connection, take turns on
// one name, holding it 1 ms each time; grants/s is the hand-off rate.

const (
	benchClients = 8
	benchHold    = time.Millisecond
	benchTTL     = 10 * time.Second
)

func BenchmarkEtcd(b *testing.B) {
	srv := startServer(b)
	eps := srv.Endpoints()

	b.Run("Uncontended/dlock", func(b *testing.B) {
		ctx := context.Background()
		m := newLocker(b, eps, dlock.WithTTL(benchTTL)).Mutex("bench/uncontended/dlock")
		b.ResetTimer()
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
	b.Run("Uncontended/concurrency.Mutex", func(b *testing.B) {
		ctx := context.Background()
		s, err := concurrency.NewSession(newClient(b, eps), concurrency.WithTTL(int(benchTTL/time.Second)))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		m := concurrency.NewMutex(s, "bench/uncontended/mutex")
		b.ResetTimer()
		for b.Loop() {
			if err := m.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("Contended/dlock", func(b *testing.B) {
		ms := make([]func(context.Context) (func(), error), benchClients)
		for i := range ms {
			m := newLocker(b, eps, dlock.WithTTL(benchTTL)).Mutex("bench/contended/dlock")
			ms[i] = func(ctx context.Context) (func(), error) {
				l, err := m.Lock(ctx)
				if err != nil {
					return nil, err
				}
				return func() { _ = l.Unlock(ctx) }, nil
			}
		}
		runContended(b, ms)
	})
	b.Run("Contended/concurrency.Mutex", func(b *testing.B) {
		ms := make([]func(context.Context) (func(), error), benchClients)
		for i := range ms {
			s, err := concurrency.NewSession(newClient(b, eps), concurrency.WithTTL(int(benchTTL/time.Second)))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			m := concurrency.NewMutex(s, "bench/contended/mutex")
			ms[i] = func(ctx context.Context) (func(), error) {
				if err := m.Lock(ctx); err != nil {
					return nil, err
				}
				return func() { _ = m.Unlock(ctx) }, nil
			}
		}
		runContended(b, ms)
	})
}

// runContended has every locker take the lock in turn, holding it
// benchHold, until b.N grants in all, and reports grants per second.
func runContended(b *testing.B, lockers []func(context.Context) (func(), error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var grants atomic.Int64
	var holders atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, len(lockers))
	b.ResetTimer()
	start := time.Now()
	for _, lock := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for grants.Add(1) <= int64(b.N) {
				unlock, err := lock(ctx)
				if err != nil {
					errs <- err
					return
				}
				if holders.Add(1) != 1 {
					errs <- errOverlap
				}
				time.Sleep(benchHold)
				holders.Add(-1)
				unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "grants/s")
}

var errOverlap = errorString("two holders at once")

type errorString string

func (e errorString) Error() string { return string(e) }
