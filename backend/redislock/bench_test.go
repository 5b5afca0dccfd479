package redislock_test

import (
	"context"
	"crypto/rand"
	mrand "math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// Lock+Unlock of a free lock against two PINGs — the two round trips it
// cannot do without — measured on the same server in a new random order
// each time around, so that the ratios are not skewed by the load on the
// machine. Three more rows place the cost: the driver's Acquire+Release
// without the portable layer (lease, renewal timer, owner key, holder
// metadata); the "reference", the least a fenced lock with an
// owner-checked release sends (an INCR + SET NX PX script, a GET + compare
// + DEL script); and two calls of a trivial script ("return 1"), the floor
// of any lock made of two Lua scripts. Each runs on its own connection.
// Reported: each row's mean time ÷ the two PINGs' (x-÷2ping), and the
// ratio of the medians for the whole lock (on a shared machine a few slow
// samples move the means; the medians show the typical call).
func BenchmarkUncontendedLockUnlockVsTwoPings(b *testing.B) {
	srv := testenv.StartRedis(b)
	client := func() *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
		b.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	c := dlock.New(newDriver(b, client()))
	defer c.Close()
	d := newDriver(b, client())
	defer d.Close()
	ctx := context.Background()
	m := c.Mutex("bench/uncontended")
	holder := []byte(`{"host":"bench","pid":1,"at":"2026-01-01T00:00:00.000Z"}`)
	fencedAcquire := redis.NewScript(`local t = redis.call('INCR', KEYS[2])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return t end
return 0`)
	fencedRelease := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
	fencedKeys := []string{"reference/{k}:lock", "reference/{k}:fence"}
	noop := redis.NewScript("return 1")
	pingRDB, refRDB, noopRDB := client(), client(), client()
	rows := []struct {
		name string
		run  func() error
	}{
		{"lock", func() error {
			l, err := m.Lock(ctx)
			if err != nil {
				return err
			}
			return l.Unlock(ctx)
		}},
		{"driver", func() error {
			req := driver.Request{Name: "bench/driver", Owner: rand.Text(), TTL: dlock.DefaultTTL, Wait: true, Holder: holder}
			g, err := d.Acquire(ctx, req)
			if err != nil {
				return err
			}
			return d.Release(ctx, driver.Held{Name: req.Name, Owner: req.Owner, Token: g.Token, Handle: g.Handle})
		}},
		{"reference", func() error {
			owner := rand.Text()
			if err := fencedAcquire.Run(ctx, refRDB, fencedKeys, owner, dlock.DefaultTTL.Milliseconds()).Err(); err != nil {
				return err
			}
			return fencedRelease.Run(ctx, refRDB, fencedKeys[:1], owner).Err()
		}},
		{"2eval", func() error {
			if err := noop.Run(ctx, noopRDB, nil).Err(); err != nil {
				return err
			}
			return noop.Run(ctx, noopRDB, nil).Err()
		}},
		{"2ping", func() error {
			if err := pingRDB.Ping(ctx).Err(); err != nil {
				return err
			}
			return pingRDB.Ping(ctx).Err()
		}},
	}
	for _, r := range rows { // load the scripts, open the connections
		if err := r.run(); err != nil {
			b.Fatal(r.name, err)
		}
	}
	took := make([][]time.Duration, len(rows))
	order := make([]int, len(rows))
	for i := range order {
		order[i] = i
	}
	b.ResetTimer()
	for range b.N {
		mrand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			t0 := time.Now()
			if err := rows[i].run(); err != nil {
				b.Fatal(rows[i].name, err)
			}
			took[i] = append(took[i], time.Since(t0))
		}
	}
	b.StopTimer()
	mean := func(d []time.Duration) float64 {
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		return float64(sum) / float64(len(d))
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2])
	}
	ping := took[len(rows)-1]
	b.ReportMetric(mean(took[0]), "lock+unlock-ns")
	b.ReportMetric(mean(ping), "2ping-ns")
	for i, r := range rows[:len(rows)-1] {
		b.ReportMetric(mean(took[i])/mean(ping), r.name+"-÷2ping")
	}
	b.ReportMetric(median(took[0])/median(ping), "p50-lock-÷2ping")
}

// Eight workers, each with its own client (as eight processes would have),
// contend for one lock and hold it 1ms each time.
func BenchmarkContended(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts []dlock.Option
	}{{"plain", nil}, {"fair", []dlock.Option{dlock.WithFair()}}} {
		b.Run(mode.name, func(b *testing.B) {
			srv := testenv.StartRedis(b)
			workers := make([]func(context.Context) (func(), error), 8)
			for i := range workers {
				c := dlock.New(newDriver(b, redis.NewClient(&redis.Options{Addr: srv.Addr})), mode.opts...)
				defer c.Close()
				m := c.Mutex("bench/contended")
				workers[i] = func(ctx context.Context) (func(), error) {
					l, err := m.Lock(ctx)
					if err != nil {
						return nil, err
					}
					return func() { _ = l.Unlock(context.Background()) }, nil
				}
			}
			testenv.Contend(workers, 8, time.Millisecond, 10*time.Second) // warm up: connections, subscriptions
			calls0 := srv.CommandCalls(b)
			b.ResetTimer()
			r := testenv.Contend(workers, b.N, time.Millisecond, 5*time.Minute)
			b.StopTimer()
			reportContention(b, r, srv.CommandCalls(b)-calls0)
		})
	}
}

// reportContention reports a contended run's figures as benchmark metrics.
func reportContention(b *testing.B, r testenv.Contention, calls int64) {
	g := float64(max(r.Grants, 1))
	b.ReportMetric(float64(r.Changes)/r.Elapsed.Seconds(), "changes/s")
	b.ReportMetric(float64(r.Grants)/r.Elapsed.Seconds(), "grants/s")
	b.ReportMetric(float64(calls)/g, "cmds/grant")
	b.ReportMetric(r.Fairness(), "fairness")
	b.ReportMetric(float64(r.WaitQuantile(0.99).Microseconds()), "p99-wait-µs")
	if r.Errors > 0 {
		b.Errorf("%d lock calls failed", r.Errors)
	}
}

// The client's heap per held lock, as the bench's scenario C measures it:
// 10,000 names locked and held at once, each with its Mutex kept, after
// GC. With DLOCK_HEAP_PROFILE=file, a heap profile is written while the
// locks are held (go tool pprof -sample_index=inuse_space file).
func BenchmarkHeldLocksHeap(b *testing.B) {
	srv := testenv.StartRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	c := dlock.New(newDriver(b, rdb), dlock.WithTTL(time.Minute))
	defer c.Close()
	ctx := context.Background()
	const n = 10000
	names := make([]string, n)
	for i := range names {
		names[i] = "held/" + strconv.Itoa(i)
	}
	for range b.N {
		mutexes := make([]*dlock.Mutex, 0, n)
		leases := make([]*dlock.Lease, 0, n)
		heap0, _ := testenv.LiveHeap()
		for _, name := range names {
			m := c.Mutex(name)
			l, err := m.Lock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			mutexes, leases = append(mutexes, m), append(leases, l)
		}
		heap1, _ := testenv.LiveHeap()
		b.ReportMetric(float64(heap1-heap0)/n, "heap-B/lock")
		if f := os.Getenv("DLOCK_HEAP_PROFILE"); f != "" {
			w, err := os.Create(f)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.Lookup("heap").WriteTo(w, 0); err != nil {
				b.Fatal(err)
			}
			_ = w.Close()
		}
		for _, l := range leases {
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
		_ = mutexes
	}
}

// BenchmarkRenewals renews 20,000 held leases one request each against
// batched (driver.BatchExtender: one pipeline per batch), side by side
// (dlocktest.BenchRenewals).
// Run: go test ./backend/redislock -run '^$' -bench Renewals -benchtime 3x
func BenchmarkRenewals(b *testing.B) {
	srv := testenv.StartRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	dlocktest.BenchRenewals(b, newDriver(b, rdb), 20000)
}
