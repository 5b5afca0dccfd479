package etcdlock_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/etcdlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/internal/testenv"
)

// The benchmarks run dlock over etcdlock next to etcd's own
// concurrency.Mutex, on one etcd server, so their ratio is measured
// side by side:
//
//	go test -run '^$' -bench . -benchtime 3s ./backend/etcdlock/
//
// Uncontended: one client locks and unlocks one name in a loop (the
// concurrency.Mutex reuses one session, as its users do).
// Contended: 8 clients, each with its own etcd connection, take turns on
// one name, holding it 1 ms each time; grants/s is the hand-off rate.
// Ratio: both, in alternating rounds of a second; contended-x and
// uncontended-x are dlock's rate over concurrency.Mutex's, and cpu-µs/grant
// the test process's CPU time per contended grant (the clients': the
// server runs in a process of its own):
//
//	go test -run '^$' -bench Etcd/Ratio -benchtime 8x ./backend/etcdlock/
//
// The server's data goes to /dev/shm where there is one, as make bench
// does: on a disk, every lock and unlock waits for a sync whose latency, on
// a shared machine, is larger and noisier than the differences between the
// clients, and hides them (a gap of 20% read as none). DLOCK_BENCH_DIR=DIR
// puts it in DIR instead, a disk's directory to measure with sync latency.

const (
	benchClients = 8
	benchHold    = time.Millisecond
	benchTTL     = 10 * time.Second
)

// benchServer starts the etcd server for the benchmarks, in a process of
// its own, with its data in DLOCK_BENCH_DIR if set, else on /dev/shm if it
// is a directory (a tmpfs: no sync latency), else in a temporary directory.
func benchServer(b *testing.B) *testenv.Etcd {
	parent := os.Getenv("DLOCK_BENCH_DIR")
	if parent == "" {
		if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
			parent = "/dev/shm"
		}
	}
	if parent == "" {
		return startServer(b)
	}
	dir, err := os.MkdirTemp(parent, "dlock-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	return testenv.StartEtcd(b, testenv.EtcdConfig{Dir: dir})
}

// locker takes the lock and returns the function that releases it.
type locker func(context.Context) (unlock func(), err error)

func dlockLockers(b *testing.B, eps []string, name string, n int) []locker {
	ls := make([]locker, n)
	for i := range ls {
		m := newLocker(b, eps, dlock.WithTTL(benchTTL)).Mutex(name)
		ls[i] = func(ctx context.Context) (func(), error) {
			l, err := m.Lock(ctx)
			if err != nil {
				return nil, err
			}
			return func() { _ = l.Unlock(ctx) }, nil
		}
	}
	return ls
}

func mutexLockers(b *testing.B, eps []string, name string, n int) []locker {
	ls := make([]locker, n)
	for i := range ls {
		s, err := concurrency.NewSession(newClient(b, eps), concurrency.WithTTL(int(benchTTL/time.Second)))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		m := concurrency.NewMutex(s, name)
		ls[i] = func(ctx context.Context) (func(), error) {
			if err := m.Lock(ctx); err != nil {
				return nil, err
			}
			return func() { _ = m.Unlock(ctx) }, nil
		}
	}
	return ls
}

func BenchmarkEtcd(b *testing.B) {
	eps := benchServer(b).Endpoints()

	uncontended := func(b *testing.B, lock locker) {
		ctx := context.Background()
		for b.Loop() {
			unlock, err := lock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			unlock()
		}
	}
	b.Run("Uncontended/dlock", func(b *testing.B) {
		uncontended(b, dlockLockers(b, eps, "bench/uncontended/dlock", 1)[0])
	})
	b.Run("Uncontended/concurrency.Mutex", func(b *testing.B) {
		uncontended(b, mutexLockers(b, eps, "bench/uncontended/mutex", 1)[0])
	})

	contended := func(b *testing.B, ls []locker) {
		b.ResetTimer()
		grants, elapsed, err := contend(ls, b.N, 0)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(grants)/elapsed.Seconds(), "grants/s")
	}
	b.Run("Contended/dlock", func(b *testing.B) {
		contended(b, dlockLockers(b, eps, "bench/contended/dlock", benchClients))
	})
	b.Run("Contended/concurrency.Mutex", func(b *testing.B) {
		contended(b, mutexLockers(b, eps, "bench/contended/mutex", benchClients))
	})

	// The ratios, measured in alternating rounds of a second each, so that
	// a machine whose load drifts during the run affects both sides alike.
	// Each iteration is one round of each.
	b.Run("Ratio", func(b *testing.B) {
		ours := dlockLockers(b, eps, "bench/ratio/dlock", benchClients)
		theirs := mutexLockers(b, eps, "bench/ratio/mutex", benchClients)
		const round = time.Second
		var cpu [2]time.Duration
		var sum [4]struct {
			n int
			d time.Duration
		}
		for b.Loop() {
			for i, ls := range [][]locker{ours, theirs} {
				c0 := cpuTime()
				n, d, err := contend(ls, 0, round)
				cpu[i] += cpuTime() - c0
				if err != nil {
					b.Fatal(err)
				}
				sum[i].n += n
				sum[i].d += d
				n, d, err = contend(ls[:1], 0, round/2)
				if err != nil {
					b.Fatal(err)
				}
				sum[2+i].n += n
				sum[2+i].d += d
			}
		}
		rate := func(i int) float64 { return float64(sum[i].n) / sum[i].d.Seconds() }
		for i := range 2 {
			b.ReportMetric(float64(cpu[i].Microseconds())/float64(sum[i].n), []string{"dlock", "mutex"}[i]+"-cpu-µs/grant")
		}
		b.ReportMetric(rate(0), "dlock-contended-grants/s")
		b.ReportMetric(rate(1), "mutex-contended-grants/s")
		b.ReportMetric(rate(0)/rate(1), "contended-x")
		b.ReportMetric(rate(2)/rate(3), "uncontended-x")
	})
}

// contend has every locker take the lock in turn, holding it benchHold
// each time, until n grants in all (n > 0) or for the duration d, and
// returns the grants and the time they took. With one locker it measures
// uncontended lock and unlock.
func contend(lockers []locker, n int, d time.Duration) (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	hold := benchHold
	if len(lockers) == 1 {
		hold = 0
	}
	var grants atomic.Int64
	var holders atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, len(lockers))
	start := time.Now()
	more := func() bool {
		if n > 0 {
			return grants.Add(1) <= int64(n)
		}
		if time.Since(start) >= d {
			return false
		}
		grants.Add(1)
		return true
	}
	for _, lock := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for more() {
				unlock, err := lock(ctx)
				if err != nil {
					errs <- err
					return
				}
				if holders.Add(1) != 1 {
					errs <- errOverlap
				}
				time.Sleep(hold)
				holders.Add(-1)
				unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	got := int(grants.Load())
	if n > 0 {
		got = n
	}
	return got, elapsed, <-errs
}

var errOverlap = errorString("two holders at once")

type errorString string

func (e errorString) Error() string { return string(e) }

// cpuTime is the CPU time this process has used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHeldLocks is make bench's scenario C ("Many names") on its
// own: 8 clients, each with its own etcd connection, lock 10,000 distinct
// names between them and hold them all; it reports this process's live
// heap and goroutines while they are held, minus before, per held lock:
//
//	go test -run '^$' -bench HeldLocks -benchtime 1x ./backend/etcdlock/
//
// The TTL is long enough that no lock is renewed while they are taken and
// measured: this is the cost of holding, not of renewing.
func BenchmarkHeldLocks(b *testing.B) {
	const (
		names = 10000
		ttl   = 5 * time.Minute
	)
	eps := benchServer(b).Endpoints()
	clients := make([]*dlock.Client, benchClients)
	for i := range clients {
		clients[i] = newLocker(b, eps, dlock.WithTTL(ttl))
	}
	ctx := context.Background()
	round := 0
	for b.Loop() {
		round++
		heap0, g0 := testenv.LiveHeap()
		held := make([][]*dlock.Lease, len(clients))
		var wg sync.WaitGroup
		errs := make(chan error, len(clients))
		for i, c := range clients {
			wg.Go(func() {
				for k := i; k < names; k += len(clients) {
					l, err := c.Mutex(fmt.Sprintf("bench/held/%d/%d", round, k)).Lock(ctx)
					if err != nil {
						errs <- err
						return
					}
					held[i] = append(held[i], l)
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		heap1, g1 := testenv.LiveHeap()
		b.ReportMetric(float64(heap1-heap0)/names, "heap-B/held-lock")
		b.ReportMetric(float64(g1-g0)/names, "goroutines/held-lock")
		for i := range held {
			wg.Go(func() {
				for _, l := range held[i] {
					_ = l.Unlock(ctx)
				}
			})
		}
		wg.Wait()
	}
}

// BenchmarkRenewals renews 20,000 held leases one request each (a
// KeepAliveOnce and a Get) against batched (driver.BatchExtender: one
// keep-alive stream and read transactions per batch), side by side
// (dlocktest.BenchRenewals).
// Run: go test ./backend/etcdlock -run '^$' -bench Renewals -benchtime 3x
func BenchmarkRenewals(b *testing.B) {
	d, err := etcdlock.New(newClient(b, benchServer(b).Endpoints()))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	dlocktest.BenchRenewals(b, d, 20000)
}
