package bench

import (
	"context"
	"crypto/rand"
	mrand "math/rand/v2"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	dredis "github.com/dlock/dlock/backend/redislock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// BenchmarkRedisUncontended places the cost of scenario A's Redis rows
// (one worker locks and unlocks a free lock in a loop) side by side, on
// one redis-server: dlock (fair and plain), dlock's driver alone (its
// Acquire and Release, without the portable layer: dlock-driver-fair and
// -plain), bsm/redislock, the fenced minimum and two PINGs.
//
// First the libraries take turns call by call, in a new random order each
// time around (as in scenario A), each call under a pprof label lib=<name>,
// so that a CPU profile (-cpuprofile) splits the client's CPU by library
// (go tool pprof -tagfocus lib=dlock-fair). Reported: each library's mean
// and median time per lock+unlock (<lib>-ns, <lib>-p50-ns) and their ratios
// to bsm's (<lib>-÷bsm, <lib>-p50-÷bsm): on a loaded machine a few slow
// calls move the means, the medians show the typical call.
//
// Then each library runs alone for a while, and the server's and the
// client's costs are read around it: the process's CPU time (user+sys,
// <lib>-clientCPU-ns), the server's time in the commands the client sent
// (INFO commandstats usec of EVALSHA, EVAL and PING, whose scripts'
// commands are inside it: <lib>-srv-ns), the server's CPU (INFO cpu,
// <lib>-srvCPU-ns) and the bytes it read and wrote (INFO stats,
// <lib>-in-B, <lib>-out-B), each per lock+unlock.
func BenchmarkRedisUncontended(b *testing.B) {
	srv := testenv.StartRedis(b)
	libs := redisLibs(srv)
	ctx := context.Background()
	type row struct {
		name   string
		w      worker
		labels pprof.LabelSet
		took   []time.Duration
	}
	var rows []*row
	for _, l := range libs {
		if l.name == "redsync" { // its 2 commands and 39 allocations are far from the goal's rows
			continue
		}
		w := l.open(b, 30*time.Second)
		b.Cleanup(w.close)
		name := strings.ReplaceAll(strings.TrimPrefix(l.name, "reference: "), " ", "-")
		name = strings.ReplaceAll(strings.TrimPrefix(name, "floor: "), ":", "")
		rows = append(rows, &row{name: name, w: w, labels: pprof.Labels("lib", name)})
	}
	// The dlock driver's Acquire+Release, without the portable layer
	// (lease, renewal schedule, owner key, holder metadata).
	for _, fair := range []bool{false, true} {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
		d, err := dredis.New(rdb)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = d.Close(); _ = rdb.Close() })
		holder := []byte(`{"host":"bench","pid":1,"acquired_at":"2026-01-01T00:00:00.000Z"}`)
		name := "dlock-driver-plain"
		if fair {
			name = "dlock-driver-fair"
		}
		w := worker{lock: func(ctx context.Context, key string) (func() error, error) {
			req := driver.Request{Name: "driver/" + key, Owner: rand.Text(), TTL: 30 * time.Second, Wait: true, Fair: fair, Holder: holder}
			g, err := d.Acquire(ctx, req)
			if err != nil {
				return nil, err
			}
			return func() error {
				return d.Release(context.Background(), driver.Held{Name: req.Name, Owner: req.Owner, Token: g.Token, Handle: g.Handle})
			}, nil
		}}
		rows = append(rows, &row{name: name, w: w, labels: pprof.Labels("lib", name)})
	}
	once := func(r *row) {
		unlock, err := r.w.lock(ctx, "uncontended")
		if err != nil {
			b.Fatal(r.name, err)
		}
		unlock()
	}
	for _, r := range rows { // load the scripts, open the connections
		for range 100 {
			once(r)
		}
	}
	b.ResetTimer()
	for range b.N {
		mrand.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
		for _, r := range rows {
			pprof.Do(ctx, r.labels, func(context.Context) {
				t0 := time.Now()
				once(r)
				r.took = append(r.took, time.Since(t0))
			})
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
	slices.SortFunc(rows, func(a, b *row) int { return strings.Compare(a.name, b.name) })
	var bsm float64
	for _, r := range rows {
		if strings.HasPrefix(r.name, "bsm") {
			bsm = mean(r.took)
		}
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2])
	}
	var bsm50 float64
	for _, r := range rows {
		if strings.HasPrefix(r.name, "bsm") {
			bsm50 = median(r.took)
		}
	}
	for _, r := range rows {
		b.ReportMetric(mean(r.took), r.name+"-ns")
		b.ReportMetric(mean(r.took)/bsm, r.name+"-÷bsm")
		b.ReportMetric(median(r.took), r.name+"-p50-ns")
		b.ReportMetric(median(r.took)/bsm50, r.name+"-p50-÷bsm")
	}

	// Alone: the server's and the client's costs per lock+unlock.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	info := func(section string) map[string]string {
		s, err := rdb.Info(ctx, section).Result()
		if err != nil {
			b.Fatal(err)
		}
		m := map[string]string{}
		for _, line := range strings.Split(s, "\r\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				m[k] = v
			}
		}
		return m
	}
	num := func(m map[string]string, k string) float64 {
		f, _ := strconv.ParseFloat(m[k], 64)
		return f
	}
	// usec: the server's time in the client's commands (the top-level ones).
	usec := func() float64 {
		m := info("commandstats")
		var sum float64
		for _, c := range []string{"evalsha", "eval", "ping"} {
			for _, f := range strings.Split(m["cmdstat_"+c], ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					x, _ := strconv.ParseFloat(v, 64)
					sum += x
				}
			}
		}
		return sum
	}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	n := min(max(b.N, 2000), 5000)
	for _, r := range rows {
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		st0, sc0, us0 := info("stats"), info("cpu"), usec()
		c0 := cpu()
		for range n {
			once(r)
		}
		c1 := cpu()
		st1, sc1, us1 := info("stats"), info("cpu"), usec()
		per := func(x float64) float64 { return x / float64(n) }
		b.ReportMetric(per(float64(c1-c0)), r.name+"-clientCPU-ns")
		b.ReportMetric(per((us1-us0)*1000), r.name+"-srv-ns")
		srvCPU := num(sc1, "used_cpu_user") + num(sc1, "used_cpu_sys") - num(sc0, "used_cpu_user") - num(sc0, "used_cpu_sys")
		b.ReportMetric(per(srvCPU*1e9), r.name+"-srvCPU-ns")
		b.ReportMetric(per(num(st1, "total_net_input_bytes")-num(st0, "total_net_input_bytes")), r.name+"-in-B")
		b.ReportMetric(per(num(st1, "total_net_output_bytes")-num(st0, "total_net_output_bytes")), r.name+"-out-B")
	}
}
