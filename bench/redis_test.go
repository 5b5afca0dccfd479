// Side-by-side benchmarks of dlock's Redis backend against the Go
// incumbents, go-redsync/redsync and bsm/redislock, on one redis-server,
// with the libraries' runs interleaved so that all of them see the same
// machine. See README.md.
package bench

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	bsmlock "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	dredis "github.com/dlock/dlock/backend/redislock"
	"github.com/dlock/dlock/internal/testenv"
)

const (
	workers = 8
	hold    = time.Millisecond // the critical section
	ttl     = 8 * time.Second  // redsync's default expiry, used by all
)

// sentCounter is a go-redis hook that counts the requests a client sends.
type sentCounter struct{ n *atomic.Int64 }

func (h sentCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h sentCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h sentCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

type worker = func(context.Context) (unlock func(), err error)

// contender is one library under test: workers, each with its own client,
// as separate processes would have.
type contender struct {
	name    string
	workers []worker
	sent    atomic.Int64

	grants, changes, errors int
	elapsed                 time.Duration
	calls, reqs             int64
	perWorker               []int
	waits                   []time.Duration
}

func newContender(name, addr string, mk func(rdb *redis.Client) worker) *contender {
	c := &contender{name: name, perWorker: make([]int, workers)}
	for range workers {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		rdb.AddHook(sentCounter{&c.sent})
		c.workers = append(c.workers, mk(rdb))
	}
	return c
}

func dlockWorker(fair bool) func(*redis.Client) worker {
	return func(rdb *redis.Client) worker {
		opts := []dlock.Option{dlock.WithTTL(ttl)}
		if fair {
			opts = append(opts, dlock.WithFair())
		}
		name := "bench/dlock-plain"
		if fair {
			name = "bench/dlock-fair"
		}
		m := dlock.New(dredis.New(rdb)).Mutex(name, opts...)
		return func(ctx context.Context) (func(), error) {
			l, err := m.Lock(ctx)
			if err != nil {
				return nil, err
			}
			return func() { _ = l.Unlock(context.Background()) }, nil
		}
	}
}

// redsync with its defaults: expiry 8s, 32 tries, 50..250ms between tries.
func redsyncWorker(rdb *redis.Client) worker {
	m := redsync.New(goredis.NewPool(rdb)).NewMutex("bench/redsync")
	return func(ctx context.Context) (func(), error) {
		if err := m.LockContext(ctx); err != nil {
			return nil, err
		}
		return func() { _, _ = m.UnlockContext(context.Background()) }, nil
	}
}

// bsm/redislock retrying every millisecond (it does not retry by default).
func bsmWorker(rdb *redis.Client) worker {
	locker := bsmlock.New(rdb)
	opt := &bsmlock.Options{RetryStrategy: bsmlock.LinearBackoff(time.Millisecond)}
	return func(ctx context.Context) (func(), error) {
		l, err := locker.Obtain(ctx, "bench/bsm", ttl, opt)
		if err != nil {
			return nil, err
		}
		return func() { _ = l.Release(context.Background()) }, nil
	}
}

func (c *contender) run(b *testing.B, srv *testenv.Redis, d time.Duration) {
	calls0, sent0 := srv.CommandCalls(b), c.sent.Load()
	r := testenv.Contend(c.workers, 1<<30, hold, d)
	c.calls += srv.CommandCalls(b) - calls0
	c.reqs += c.sent.Load() - sent0
	c.grants += r.Grants
	c.changes += r.Changes
	c.errors += r.Errors
	c.elapsed += r.Elapsed
	c.waits = append(c.waits, r.Waits...)
	for i, n := range r.PerWorker {
		c.perWorker[i] += n
	}
}

func (c *contender) result() testenv.Contention {
	return testenv.Contention{Grants: c.grants, Changes: c.changes, PerWorker: c.perWorker, Waits: c.waits, Errors: c.errors, Elapsed: c.elapsed}
}

func (c *contender) changesPerSec() float64 { return float64(c.changes) / c.elapsed.Seconds() }
func (c *contender) callsPerGrant() float64 { return float64(c.calls) / float64(max(c.grants, 1)) }
func (c *contender) reqsPerGrant() float64  { return float64(c.reqs) / float64(max(c.grants, 1)) }

// Eight workers contend for one lock and hold it 1ms each time. Each
// library runs for a few seconds, in turn, for several rounds. Reported per
// library: holder changes per second (grants that went to another worker
// than the previous one), Redis commands per grant as INFO commandstats
// counts them (including those run inside Lua scripts), requests sent per
// grant, fairness (fewest grants of a worker / most), acquire-wait p99,
// and lock calls that gave up. Run with -benchtime=1x.
func BenchmarkContendedRedis(b *testing.B) {
	srv := testenv.StartRedis(b)
	cs := []*contender{
		newContender("dlock-fair", srv.Addr, dlockWorker(true)),
		newContender("dlock-plain", srv.Addr, dlockWorker(false)),
		newContender("redsync", srv.Addr, redsyncWorker),
		newContender("bsm-linear1ms", srv.Addr, bsmWorker),
	}
	for _, c := range cs {
		testenv.Contend(c.workers, 8, hold, 10*time.Second) // warm up
	}
	const rounds, each = 3, 3 * time.Second
	for range b.N {
		for range rounds {
			for _, c := range cs {
				c.run(b, srv, each)
			}
		}
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-14s %10s %10s %11s %10s %9s %12s %7s\n", "library", "grants/s", "changes/s", "cmds/grant", "reqs/grant", "fairness", "p99 wait", "gave up")
	for _, c := range cs {
		r := c.result()
		fmt.Fprintf(&table, "%-14s %10.1f %10.1f %11.2f %10.2f %9.3f %12v %7d\n", c.name,
			float64(c.grants)/c.elapsed.Seconds(), c.changesPerSec(), c.callsPerGrant(), c.reqsPerGrant(),
			r.Fairness(), r.WaitQuantile(0.99).Round(10*time.Microsecond), c.errors)
		key := strings.ReplaceAll(c.name, "-", "_")
		b.ReportMetric(c.changesPerSec(), key+"-changes/s")
		b.ReportMetric(c.callsPerGrant(), key+"-cmds/grant")
		b.ReportMetric(r.Fairness(), key+"-fairness")
	}
	fair, plain, rs, bsm := cs[0], cs[1], cs[2], cs[3]
	ratios := map[string]float64{
		"fair-changes÷redsync": fair.changesPerSec() / max(rs.changesPerSec(), 1e-9),
		"fair-changes÷bsm":     fair.changesPerSec() / bsm.changesPerSec(),
		"fair-cmds÷bsm":        fair.callsPerGrant() / bsm.callsPerGrant(),
		"fair-reqs÷bsm":        fair.reqsPerGrant() / bsm.reqsPerGrant(),
		"plain-changes÷bsm":    plain.changesPerSec() / bsm.changesPerSec(),
		"plain-cmds÷bsm":       plain.callsPerGrant() / bsm.callsPerGrant(),
	}
	var keys []string
	for k := range ratios {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&table, "%-22s %8.3f\n", k, ratios[k])
		b.ReportMetric(ratios[k], k)
	}
	fmt.Print(table.String()) // in full: b.Log would truncate it
}
