package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/dlock/dlock/backend/etcdlock"
	"github.com/dlock/dlock/internal/etcdserver"
	"github.com/dlock/dlock/internal/testenv"
)

var (
	results  = flag.Bool("results", false, "run every scenario and write RESULTS.md and the charts (make bench)")
	scale    = flag.Float64("scale", 1, "multiply every measuring duration by this")
	million  = flag.String("million", "redis/dlock-fair,redis/bsm-linear1ms", "backend/library pairs that also run scenario C with 1,000,000 names")
	budget   = flag.Duration("budget", 16*time.Minute, "skip the 1,000,000-name runs that would end the whole run later than this")
	outDir   = flag.String("out", ".", "where RESULTS.md and the charts go")
	etcdData = flag.String("etcd-dir", "/dev/shm", "parent directory of the etcd server's data (a tmpfs takes the disk out)")
)

// The settings of the scenarios, before -scale.
const (
	ttl        = 8 * time.Second // redsync's default expiry, used by all
	hold       = time.Millisecond
	roundsA    = 3
	eachA      = time.Second
	roundsB    = 3
	eachB      = 2 * time.Second
	warmUp     = 500 * time.Millisecond
	eachPoint  = 1500 * time.Millisecond
	ttlC       = 10 * time.Minute // no renewal while the many keys are held
	keysC      = 10_000
	keysCLarge = 1_000_000
	workersC   = 8
)

var (
	workersB     = []int{8, 64}
	curveWorkers = []int{1, 2, 4, 8, 16, 32, 64}
	curveHolds   = []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond}
)

const etcdChildEnv = "DLOCK_BENCH_ETCD" // dir,clientAddr: this process is the etcd server

func TestMain(m *testing.M) {
	if v := os.Getenv(etcdChildEnv); v != "" {
		os.Exit(serveEtcd(v))
	}
	os.Exit(m.Run())
}

// serveEtcd runs an embedded etcd server until the process is killed. It
// runs in a child process, so that the server's heap and CPU are not the
// clients'.
func serveEtcd(v string) int {
	i := strings.LastIndex(v, ",")
	dir, addr := v[:i], v[i+1:]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := etcdserver.Start(ctx, etcdserver.Config{Dir: dir, ClientAddr: addr}); err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	}
	fmt.Println("etcd serving on", addr)
	select {} // until the parent kills it, or dies (parent-death signal)
}

// startEtcd starts the embedded etcd server in a child process (this test
// binary, re-executed) and returns its client endpoint.
func startEtcd(t *testing.T) (endpoint, dataDir string) {
	parent := *etcdData
	if fi, err := os.Stat(parent); err != nil || !fi.IsDir() {
		parent = ""
	}
	dir, err := os.MkdirTemp(parent, "dlock-bench-etcd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), etcdChildEnv+"="+filepath.Join(dir, "data")+","+addr)
	p := testenv.Start(t, "etcd", cmd)
	if err := p.WaitLog("etcd serving", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr, dir
}

func scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * *scale) }

// backend is one engine and the libraries measured on it.
type backend struct {
	name    string
	libs    []*lib
	maxB    int  // most workers in scenario B
	curves  bool // draw its curves
	manyKey bool // run scenario C
}

func (b *backend) floor() *lib {
	for _, l := range b.libs {
		if l.role == floor {
			return l
		}
	}
	return nil
}

func (b *backend) lockLibs() []*lib {
	var ls []*lib
	for _, l := range b.libs {
		if l.role != floor && l.role != reference {
			ls = append(ls, l)
		}
	}
	return ls
}

func TestResults(t *testing.T) {
	if !*results {
		t.Log("make bench runs this with -results; without it there is nothing to do")
		return
	}
	r := newReport()
	r.progress("starting servers")
	rs := testenv.StartRedis(t)
	r.servers = append(r.servers, serverRow{"redis", redisVersion(), "no persistence (no RDB, no AOF)"})
	etcdEP, etcdDir := startEtcd(t)
	r.servers = append(r.servers, serverRow{"etcd", "embedded etcd server " + modVersion("go.etcd.io/etcd/server/v3") + ", in a child process",
		"single member, data in " + etcdDir + " (fsync to " + filepath.Dir(etcdDir) + ")"})
	zks := testenv.StartZooKeeper(t, testenv.ZooKeeperOptions{NoSync: true})
	r.servers = append(r.servers, serverRow{"zookeeper", zkVersion(zks), "standalone, forceSync=no, tickTime 200 ms"})
	backends := []*backend{
		{name: "redis", libs: redisLibs(rs), maxB: 64, curves: true, manyKey: true},
		{name: "etcd", libs: etcdLibs(etcdEP), maxB: 64, curves: true, manyKey: true},
		{name: "zookeeper", libs: zkLibs(zks.Addrs()[0]), maxB: 64, curves: true, manyKey: true},
	}
	pg := testenv.StartPostgres(t)
	r.servers = append(r.servers, serverRow{"postgres", pgVersion(pg), "fsync=off, synchronous_commit on"})
	backends = append(backends, &backend{name: "postgres", libs: postgresLibs(pg), maxB: 8, manyKey: true})
	mdb := testenv.StartMariaDB(t)
	r.servers = append(r.servers, serverRow{"mariadb", mariadbVersion(mdb), "testenv defaults"})
	backends = append(backends, &backend{name: "mariadb", libs: mariadbLibs(mdb), maxB: 8, manyKey: true})
	r.backends = backends
	r.prims = []*primBackend{
		newPrimBackend(t, "redis", openURL("redis://"+rs.Addr+"/0")),
		newPrimBackend(t, "etcd", openURL("etcd://"+strings.TrimPrefix(etcdEP, "http://")), etcdPrimIncumbents(etcdEP)...),
		newPrimBackend(t, "zookeeper", openURL("zk://"+zks.Addrs()[0]+"/bench")),
		newPrimBackend(t, "postgres", openURL(pg.URL(pg.Addr, ""))),
		newPrimBackend(t, "mariadb", openURL(mdb.URL(testenv.MariaDBUser, testenv.MariaDBPassword, mdb.Addr))),
	}
	r.sleep = measureSleep(hold)

	for _, b := range backends {
		r.scenarioA(t, b)
	}
	for _, b := range backends {
		r.scenarioB(t, b)
	}
	r.scenarioP(t)
	for _, n := range []int{keysC, keysCLarge} { // the long runs last, where the budget can drop them
		for _, b := range backends {
			if b.manyKey {
				r.scenarioC(t, b, n)
			}
		}
	}
	if err := r.write(*outDir); err != nil {
		t.Fatal(err)
	}
	r.progress("wrote %s", filepath.Join(*outDir, "RESULTS.md"))
}

// openWorkers connects n workers of l.
func openWorkers(t *testing.T, l *lib, n int, ttl time.Duration) []worker {
	ws := make([]worker, n)
	for i := range ws {
		ws[i] = l.open(t, ttl)
	}
	return ws
}

func closeWorkers(ws []worker) {
	for _, w := range ws {
		w.close()
	}
}

// scenarioA runs A (uncontended) and D (the floor), one worker per
// library: rounds in which the libraries' lock+unlock calls are
// interleaved one by one, then a short pass per library alone that counts
// its allocations.
func (r *report) scenarioA(t *testing.T, b *backend) {
	r.progress("A/D uncontended, %s: %d rounds of %v, the libraries interleaved call by call", b.name, roundsA, scaled(eachA)*time.Duration(len(b.libs)))
	ws := make([]worker, len(b.libs))
	ss := make([]*serial, len(b.libs))
	sent := make([]*atomic.Int64, len(b.libs))
	keys := make([]string, len(b.libs))
	for i, l := range b.libs {
		ws[i] = l.open(t, ttl)
		defer ws[i].close()
		ss[i], sent[i], keys[i] = r.serial(l), &l.sent, l.name+"/a"
		var warm serial
		warm.countAllocs(ws[i], keys[i], scaled(warmUp)/5) // create what the first lock creates
	}
	for round := range roundsA {
		interleaved(ws, ss, sent, keys, scaled(eachA)*time.Duration(len(b.libs)))
		for i, l := range b.libs {
			r.progress("  round %d %-22s %8.0f ops/s", round+1, l.name, ss[i].opsPerSec())
		}
	}
	for i := range b.libs {
		ss[i].countAllocs(ws[i], keys[i], scaled(eachA)/4)
	}
}

// scenarioB runs B (contended, 8 and 64 workers) and the curves.
func (r *report) scenarioB(t *testing.T, b *backend) {
	ls := b.lockLibs()
	ws := make([][]worker, len(ls))
	r.progress("B contended, %s: connecting %d workers per library", b.name, b.maxB)
	for i, l := range ls {
		ws[i] = openWorkers(t, l, b.maxB, ttl)
		defer closeWorkers(ws[i])
	}
	run := func(i int, n int, key string, hold, d time.Duration, c *contention) {
		l := ls[i]
		var calls0 int64
		if l.redis != nil {
			calls0 = l.redis.CommandCalls(t)
		}
		reqs0 := l.sent.Load()
		c.run(ws[i][:n], l.name+"/"+key, hold, d)
		c.reqs += l.sent.Load() - reqs0
		if l.redis != nil {
			c.calls += l.redis.CommandCalls(t) - calls0
		}
	}
	for _, n := range workersB {
		if n > b.maxB {
			continue
		}
		key := "b" + strconv.Itoa(n)
		for i := range ls {
			var c contention
			c.run(ws[i][:n], ls[i].name+"/"+key, hold, scaled(warmUp))
		}
		for round := range roundsB {
			for i, l := range ls {
				c := r.contended(l, n)
				run(i, n, key, hold, roundB(n), c)
				r.progress("  %2d workers, round %d %-20s %8.1f changes/s  fairness %.2f  gave up %d", n, round+1, l.name, c.changesPerSec(), c.fairness(), c.errors)
			}
		}
	}
	if !b.curves {
		return
	}
	r.progress("curves, %s: %v each point", b.name, scaled(eachPoint))
	for xi, n := range curveWorkers {
		for i, l := range ls {
			var c contention
			run(i, n, "cw"+strconv.Itoa(n), hold, scaled(eachPoint), &c)
			r.curvePoint(b.name, "workers", l.name, xi, len(curveWorkers), &c)
			if n == 8 {
				r.curvePoint(b.name, "hold", l.name, 1, len(curveHolds), &c)
			}
		}
		r.progress("  %2d workers done", n)
	}
	for xi, h := range curveHolds {
		if h == hold {
			continue // the 8-worker point above
		}
		for i, l := range ls {
			var c contention
			run(i, 8, "ch"+strconv.Itoa(int(h/time.Millisecond)), h, scaled(eachPoint), &c)
			r.curvePoint(b.name, "hold", l.name, xi, len(curveHolds), &c)
		}
		r.progress("  hold %v done", h)
	}
}

// scenarioC runs C: many names held at once.
func (r *report) scenarioC(t *testing.T, b *backend, n int) {
	for _, l := range b.lockLibs() {
		if n == keysCLarge && !slices.Contains(strings.Split(*million, ","), b.name+"/"+l.name) {
			continue
		}
		if n == keysCLarge {
			// Estimated from the same library's 10,000-name run, twice
			// over: with a heap a hundred times larger, the collector
			// slows every operation down about that much.
			est := time.Duration(2 * float64(n) * float64(time.Second) * (1/r.manyRate(l, (*manyKeys).lockPerSec) + 1/r.manyRate(l, (*manyKeys).freePerSec)))
			if time.Since(r.start)+est > *budget {
				r.skipped = append(r.skipped, fmt.Sprintf("%s %s with %d names: it would take about %v, past the run's budget of %v", b.name, l.name, n, est.Round(time.Second), *budget))
				r.progress("C skipped: %s", r.skipped[len(r.skipped)-1])
				continue
			}
		}
		r.progress("C many keys, %s %s: %d names over %d workers", b.name, l.name, n, workersC)
		ws := openWorkers(t, l, workersC, ttlC)
		var m manyKeys
		m.run(ws, l.name+"/c"+strconv.Itoa(n)+"/", n, r.progress)
		closeWorkers(ws)
		r.many = append(r.many, manyRow{b.name, l, &m})
		r.progress("  %.0f locks/s, %.0f unlocks/s, %.0f heap bytes and %.3f goroutines per held lock, %d errors",
			m.lockPerSec(), m.freePerSec(), m.heapPerLock, m.goroutinesPerLock, m.errors)
	}
}

// roundB is the length of a round of B with n workers: longer with many
// workers, so that each gets enough turns for min ÷ max grants to mean
// something.
func roundB(n int) time.Duration { return scaled(eachB) * time.Duration(max(n/32, 1)) }

// measureSleep is how long time.Sleep(d) really takes here (median).
func measureSleep(d time.Duration) time.Duration {
	ds := make([]time.Duration, 200)
	for i := range ds {
		t0 := time.Now()
		time.Sleep(d)
		ds[i] = time.Since(t0)
	}
	return quantile(ds, 0.5)
}
