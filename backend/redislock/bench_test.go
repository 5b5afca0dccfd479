package redislock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/redislock"
	"github.com/dlock/dlock/internal/testenv"
)

// Lock+Unlock of a free lock against two PINGs — the two round trips it
// cannot do without — measured alternately on the same server, so that the
// ratio is not skewed by the load on the machine. Two calls of a trivial
// script ("return 1") are measured too: the floor of any lock whose
// acquire and release are Lua scripts. Reported: the mean of each, and the
// ratios of the means and of the medians (on a shared machine a few slow
// samples move the means; the medians show the typical call).
func BenchmarkUncontendedLockUnlockVsTwoPings(b *testing.B) {
	srv := testenv.StartRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	c := dlock.New(redislock.New(rdb))
	defer c.Close()
	ctx := context.Background()
	m := c.Mutex("bench/uncontended")
	noop := redis.NewScript("return 1")
	lockNS := make([]time.Duration, 0, b.N)
	pingNS := make([]time.Duration, 0, b.N)
	evalNS := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		l, err := m.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := rdb.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		if err := rdb.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		for range 2 {
			if err := noop.Run(ctx, rdb, nil).Err(); err != nil {
				b.Fatal(err)
			}
		}
		lockNS = append(lockNS, t1.Sub(t0))
		pingNS = append(pingNS, t2.Sub(t1))
		evalNS = append(evalNS, time.Since(t2))
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
	b.ReportMetric(mean(lockNS), "lock+unlock-ns")
	b.ReportMetric(mean(pingNS), "2ping-ns")
	b.ReportMetric(mean(lockNS)/mean(pingNS), "ratio")
	b.ReportMetric(median(lockNS)/median(pingNS), "p50-ratio")
	b.ReportMetric(median(evalNS)/median(pingNS), "p50-2eval÷2ping")
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
				c := dlock.New(redislock.New(redis.NewClient(&redis.Options{Addr: srv.Addr})), mode.opts...)
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
