package bench

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math"
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
	results   = flag.Bool("results", false, "run every scenario and write RESULTS.md and the charts (make bench)")
	scale     = flag.Float64("scale", 1, "multiply every measuring duration by this")
	backendsF = flag.String("backends", "", "comma list of the backends to measure ("+strings.Join(allBackends, ", ")+"); empty: all")
	million   = flag.String("million", defaultMillion, "backend/library pairs that also run scenario C with 1,000,000 names")
	millionW  = flag.Int("million-workers", workersC, "workers of a 1,000,000-name run of scenario C (64 went slower than 8 on every backend here)")
	largeN    = flag.Int("large", keysCLarge, "names of the large run of scenario C (the goals ask for 1,000,000; fewer measures its rate sooner)")
	budget    = flag.Duration("budget", 80*time.Minute, "skip the 1,000,000-name runs that would end the whole run later than this")
	outDir    = flag.String("out", ".", "where RESULTS.md and the charts go")
	manyOnly  = flag.Bool("many-only", false, "run scenario C only, for the libraries of -million: their small run, then the large one (make bench-million)")
	etcdData  = flag.String("etcd-dir", "/dev/shm", "parent directory of the etcd server's data (a tmpfs takes the disk out)")
)

// allBackends are the backends of a run, in the order they run.
var allBackends = []string{"redis", "etcd", "zookeeper", "postgres", "mariadb", "temporal"}

// defaultMillion are the libraries that run C with 1,000,000 names: dlock's
// default mode on every backend, and one incumbent on Redis, where it is
// cheap. Those whose run would not fit in -budget or in the machine's
// memory, estimated from their 10,000-name run, are left out, and
// RESULTS.md says why (100,000 names with 64 workers on a loaded machine
// went at 590 locks/s on etcd, 444 on ZooKeeper, 704 on MariaDB, and 415
// unlocks/s on PostgreSQL: a million would take over half an hour each;
// 64 workers were slower than 8 everywhere, on Redis 3,831 locks/s
// against 11,275).
const defaultMillion = "redis/dlock-fair,redis/bsm-linear1ms,etcd/dlock,zookeeper/dlock,postgres/dlock-plain,mariadb/dlock,temporal/dlock-fair"

// selected says whether -backends lets the run measure backend.
func selected(backend string) bool {
	return *backendsF == "" || slices.Contains(strings.Split(*backendsF, ","), backend)
}

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
	workersB     = []int{8, 32, 64} // the B tables; each backend runs those of its bWorkers
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
	name     string
	libs     []*lib
	bWorkers []int // workers in scenario B
	curveMax int   // most workers on its curves; 0: no curves
	manyKey  bool  // run scenario C
	keysC    int   // names of its small run of C (keysC if 0)
}

// maxB is the most workers b runs in scenario B.
func (b *backend) maxB() int { return slices.Max(b.bWorkers) }

// keysSmall is the number of names of b's small run of C.
func (b *backend) keysSmall() int {
	if b.keysC > 0 {
		return b.keysC
	}
	return keysC
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
		if l.role != floor && l.role != reference && l.role != handoff {
			ls = append(ls, l)
		}
	}
	return ls
}

// contendedLibs are the libraries of B's rounds: the locks and the
// hand-off references.
func (b *backend) contendedLibs() []*lib {
	var ls []*lib
	for _, l := range b.libs {
		if l.role != floor && l.role != reference {
			ls = append(ls, l)
		}
	}
	return ls
}

// serialLibs are the libraries of A and D: all but the hand-off
// references.
func (b *backend) serialLibs() []*lib {
	var ls []*lib
	for _, l := range b.libs {
		if l.role != handoff {
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
	for _, b := range strings.Split(*backendsF, ",") {
		if b != "" && !slices.Contains(allBackends, b) {
			t.Fatalf("-backends: unknown backend %q (want some of %s)", b, strings.Join(allBackends, ", "))
		}
	}
	// The output directory is made now, not found missing at the end of a
	// long run.
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		t.Fatalf("-out: %v", err)
	}
	r := newReport()
	r.progress("starting servers")
	var backends []*backend
	if selected("redis") {
		rs := testenv.StartRedis(t)
		r.servers = append(r.servers, serverRow{"redis", redisVersion(), "no persistence (no RDB, no AOF)"})
		backends = append(backends, &backend{name: "redis", libs: redisLibs(rs), bWorkers: []int{8, 64}, curveMax: 64, manyKey: true})
		r.prims = append(r.prims, newPrimBackend(t, "redis", openURL("redis://"+rs.Addr+"/0")))
	}
	if selected("etcd") {
		etcdEP, etcdDir := startEtcd(t)
		r.servers = append(r.servers, serverRow{"etcd", "embedded etcd server " + modVersion("go.etcd.io/etcd/server/v3") + ", in a child process",
			"single member, data in " + etcdDir + " (fsync to " + filepath.Dir(etcdDir) + "), quota-backend-bytes " + etcdQuota})
		backends = append(backends, &backend{name: "etcd", libs: etcdLibs(etcdEP), bWorkers: []int{8, 64}, curveMax: 64, manyKey: true})
		r.prims = append(r.prims, newPrimBackend(t, "etcd", openURL("etcd://"+strings.TrimPrefix(etcdEP, "http://")), etcdPrimIncumbents(etcdEP)...))
	}
	if selected("zookeeper") {
		zks := testenv.StartZooKeeper(t, testenv.ZooKeeperOptions{NoSync: true, Heap: zkHeap})
		r.servers = append(r.servers, serverRow{"zookeeper", zkVersion(zks), "standalone, forceSync=no, tickTime 200 ms, JVM heap -Xmx" + zkHeap})
		backends = append(backends, &backend{name: "zookeeper", libs: zkLibs(zks.Addrs()[0]), bWorkers: []int{8, 64}, curveMax: 64, manyKey: true})
		r.prims = append(r.prims, newPrimBackend(t, "zookeeper", openURL("zk://"+zks.Addrs()[0]+"/bench")))
	}
	if selected("postgres") {
		pg := testenv.StartPostgresWith(t, postgresSettings...)
		r.servers = append(r.servers, serverRow{"postgres", pgVersion(pg), "fsync=off, synchronous_commit on, " + strings.Join(postgresSettings, ", ")})
		backends = append(backends, &backend{name: "postgres", libs: postgresLibs(pg), bWorkers: []int{8}, manyKey: true})
		r.prims = append(r.prims, newPrimBackend(t, "postgres", openURL(pg.URL(pg.Addr, ""))))
	}
	if selected("mariadb") {
		mdb := testenv.StartMariaDBWith(t, mariadbArgs...)
		r.servers = append(r.servers, serverRow{"mariadb", mariadbVersion(mdb), "no flush at commit: " + strings.Join(mariadbArgs, " ") + " (no binary log)"})
		backends = append(backends, &backend{name: "mariadb", libs: mariadbLibs(mdb), bWorkers: []int{8}, manyKey: true})
		r.prims = append(r.prims, newPrimBackend(t, "mariadb", openURL(mdb.URL(testenv.MariaDBUser, testenv.MariaDBPassword, mdb.Addr))))
	}
	if selected("temporal") {
		ts := testenv.StartTemporal(t)
		r.servers = append(r.servers, serverRow{"temporal", temporalVersion(), "dev server (temporal server start-dev), SQLite in WAL mode with synchronous=normal, the server's default dynamic config"})
		var raised *testenv.Temporal
		if !*manyOnly {
			raised = testenv.StartTemporal(t, fmt.Sprintf("history.maxInFlightUpdates=%d", raisedInFlight))
			r.servers = append(r.servers, serverRow{"temporal", temporalVersion(), fmt.Sprintf("a second dev server as above but for history.maxInFlightUpdates=%d, for scenario B's references only (the raw hand-off and the raised-limit reference)", raisedInFlight)})
		}
		backends = append(backends, &backend{name: "temporal", libs: temporalLibs(ts, raised), bWorkers: []int{8, 32}, curveMax: 32, manyKey: true, keysC: keysCTemporal})
	}
	r.backends = backends
	r.sleep = measureSleep(hold)

	if !*manyOnly {
		for _, b := range backends {
			r.scenarioA(t, b)
		}
		for _, b := range backends {
			r.scenarioB(t, b)
		}
		r.scenarioP(t)
	}
	for _, b := range backends {
		if b.manyKey {
			r.scenarioC(t, b, b.keysSmall())
		}
	}
	// The long runs last, where the budget can drop them: after the other
	// scenarios, and among themselves the shortest first, by the time
	// estimated from each backend's small run.
	for _, b := range r.byLargeEstimate(backends) {
		r.scenarioC(t, b, *largeN)
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
	libs := b.serialLibs()
	r.progress("A/D uncontended, %s: %d rounds of %v, the libraries interleaved call by call", b.name, roundsA, scaled(eachA)*time.Duration(len(libs)))
	ws := make([]worker, len(libs))
	ss := make([]*serial, len(libs))
	sent := make([]*atomic.Int64, len(libs))
	keys := make([]string, len(libs))
	for i, l := range libs {
		ws[i] = l.open(t, ttl)
		defer ws[i].close()
		ss[i], sent[i], keys[i] = r.serial(l), &l.sent, l.name+"/a"
		var warm serial
		warm.countAllocs(ws[i], keys[i], scaled(warmUp)/5) // create what the first lock creates
	}
	for round := range roundsA {
		interleaved(ws, ss, sent, keys, scaled(eachA)*time.Duration(len(libs)))
		for i, l := range libs {
			r.progress("  round %d %-22s %8.0f ops/s", round+1, l.name, ss[i].opsPerSec())
		}
	}
	for i := range libs {
		ss[i].countAllocs(ws[i], keys[i], scaled(eachA)/4)
	}
}

// scenarioB runs B (contended, 8 and 64 workers) and the curves (without
// the hand-off references).
func (r *report) scenarioB(t *testing.T, b *backend) {
	ls := b.contendedLibs()
	ws := make([][]worker, len(ls))
	r.progress("B contended, %s: connecting %d workers per library", b.name, b.maxB())
	for i, l := range ls {
		ws[i] = openWorkers(t, l, max(b.maxB(), b.curveMax), ttl)
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
	for _, n := range b.bWorkers {
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
	if b.curveMax == 0 {
		return
	}
	r.progress("curves, %s: %v each point", b.name, scaled(eachPoint))
	for xi, n := range curveWorkers {
		if n > b.curveMax {
			continue
		}
		for i, l := range ls {
			if l.role == handoff {
				continue
			}
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
			if l.role == handoff {
				continue
			}
			var c contention
			run(i, 8, "ch"+strconv.Itoa(int(h/time.Millisecond)), h, scaled(eachPoint), &c)
			r.curvePoint(b.name, "hold", l.name, xi, len(curveHolds), &c)
		}
		r.progress("  hold %v done", h)
	}
}

// scenarioC runs C: many names held at once; large is the run of -large
// names (1,000,000), for the libraries of -million only.
func (r *report) scenarioC(t *testing.T, b *backend, n int) {
	large := n == *largeN && n != b.keysSmall()
	workers := workersC
	if large {
		workers = *millionW
	}
	for _, l := range b.lockLibs() {
		if (large || *manyOnly) && !inMillion(b, l) {
			continue
		}
		if large {
			if why := r.largeFits(l, n); why != "" {
				r.skipped = append(r.skipped, skip{l, fmt.Sprintf("%s %s with %d names: %s", b.name, l.name, n, why)})
				r.progress("C skipped: %s", r.skipped[len(r.skipped)-1].why)
				continue
			}
		}
		r.progress("C many keys, %s %s: %d names over %d workers (%d MiB of memory available)", b.name, l.name, n, workers, memAvailable()>>20)
		ws := openWorkers(t, l, workers, ttlC)
		var m manyKeys
		deadline, unlockRate := time.Now().Add(30*time.Minute), math.Inf(1) // the small runs are not bounded by the budget
		if large {
			deadline, unlockRate = r.start.Add(*budget), r.manyRun(l, b.keysSmall()).freePerSec()
		}
		m.run(ws, l.name+"/c"+strconv.Itoa(n)+"/", n, deadline, unlockRate, nil, r.progress)
		if l.shed != nil && !large {
			// Again, shedding while the names are held, in a run of its
			// own: the unlocks after a shed may cost more (a Temporal
			// workflow's history replayed), which the run above keeps out
			// of its figures.
			var s manyKeys
			s.run(ws, l.name+"/c"+strconv.Itoa(n)+"/shed/", n, deadline, unlockRate, l.shed, r.progress)
			m.shed, m.shedHeapPerLock, m.shedGoroutinesPerLock, m.shedErrors = s.shed, s.shedHeapPerLock, s.shedGoroutinesPerLock, s.errors+s.unlockErrors
			r.progress("  again, with %s: %.0f heap bytes and %.3f goroutines per held lock (%.0f before it), %d errors%s",
				l.shedWhat, s.shedHeapPerLock, s.shedGoroutinesPerLock, s.heapPerLock, s.errors, s.stoppedNote())
		}
		closeWorkers(ws)
		r.many = append(r.many, manyRow{b.name, l, &m})
		r.progress("  %.0f locks/s, %.0f unlocks/s, %.0f heap bytes, %.0f bytes of the machine's memory and %.3f goroutines per held lock, %d errors%s",
			m.lockPerSec(), m.freePerSec(), m.heapPerLock, m.machinePerLock, m.goroutinesPerLock, m.errors, m.stoppedNote())
	}
}

// inMillion reports whether l of b is in -million's list.
func inMillion(b *backend, l *lib) bool {
	return slices.Contains(strings.Split(*million, ","), b.name+"/"+l.name)
}

// byLargeEstimate orders the backends that run C by the time their large
// runs of -million would take, as largeEstimate puts it, shortest first.
func (r *report) byLargeEstimate(backends []*backend) []*backend {
	type est struct {
		b *backend
		d time.Duration
	}
	var es []est
	for _, b := range backends {
		if !b.manyKey {
			continue
		}
		var d time.Duration
		for _, l := range b.lockLibs() {
			if inMillion(b, l) {
				d += r.largeEstimate(l, *largeN)
			}
		}
		es = append(es, est{b, d})
	}
	slices.SortStableFunc(es, func(x, y est) int { return cmp.Compare(x.d, y.d) })
	out := make([]*backend, len(es))
	for i, e := range es {
		out[i] = e.b
	}
	return out
}

// largeEstimate is how long l's run of n names would take, from the same
// library's small run (0 when that did not run): its rates, twice over.
// With a heap a hundred times larger, the collector slows every operation
// down, and more workers do not make up for it where the server bounds
// the rate (etcd with 64 workers and 100,000 names: 1.75 times the
// 10,000-name time).
func (r *report) largeEstimate(l *lib, n int) time.Duration {
	small := r.manyRun(l, r.backend(l.backend).keysSmall())
	if small == nil {
		return 0
	}
	return time.Duration(2 * float64(n) * float64(time.Second) * (1/max(small.lockPerSec(), 1e-3) + 1/max(small.freePerSec(), 1e-3)))
}

// largeFits says why l's run of n names would not fit, or "" if it fits: its time, estimated from the same library's
// small run, must end the run within -budget, and the memory it would
// take (the client heap per held lock of the small run, twice over for the
// collector's headroom) must leave 2 GiB of the machine's available memory.
func (r *report) largeFits(l *lib, n int) string {
	small := r.manyRun(l, r.backend(l.backend).keysSmall())
	if small == nil {
		return "its small run did not run"
	}
	est := r.largeEstimate(l, n)
	if time.Since(r.start)+est > *budget {
		return fmt.Sprintf("at its %d-name rates it would take about %v, past the run's budget of %v", small.n, est.Round(time.Second), *budget)
	}
	// The client's heap only: the machine's memory per held lock of a
	// small run is mostly whatever else the shared machine did meanwhile
	// (18 KB on etcd and 59 KB on ZooKeeper in a run of 10,000 names
	// beside other tests: 18 and 59 GB for a million), and the servers'
	// memory is watched while the large run locks (minFreeMemory).
	need := uint64(2 * small.heapPerLock * float64(n))
	if avail := memAvailable(); need+2<<30 > avail {
		return fmt.Sprintf("its client would need about %d MiB of heap (%.0f B per held lock in its %d-name run, twice over), and %d MiB are available", need>>20, small.heapPerLock, small.n, avail>>20)
	}
	return ""
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

// Server settings of the run.
const (
	etcdQuota = "etcd's default (2 GiB)"
	zkHeap    = "2g" // a million ephemeral nodes need more than testenv's 256m
	// keysCTemporal is Temporal's small run of C: each name is a workflow.
	keysCTemporal = 1_000
)

// postgresSettings let 64 workers (-million-workers 64) connect: each has
// a pgx pool of up to 4 connections, 256 in all, past testenv's
// max_connections of 200 (the refused connections slowed the unlocks of
// 100,000 names to a crawl).
var postgresSettings = []string{"max_connections=400"}

// mariadbArgs take MariaDB's flush at every commit out, as fsync=off does
// PostgreSQL's: the log is written at commit and flushed once a second.
var mariadbArgs = []string{"--innodb-flush-log-at-trx-commit=0", "--sync-binlog=0"}
