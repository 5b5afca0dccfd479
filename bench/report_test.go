package bench

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock/dlock/internal/testenv"
)

type serverRow struct{ name, version, settings string }

// skip is a run of scenario C left out, and why.
type skip struct {
	lib *lib
	why string
}

type manyRow struct {
	backend string
	lib     *lib
	m       *manyKeys
}

// curve is one backend's lines against one variable: per library, the
// holder changes/s and the p99 wait (ms) per x position.
type curve struct {
	libs           []string
	changes, p99Ms map[string][]float64
}

// report gathers the figures of one run and writes RESULTS.md.
type report struct {
	start       time.Time
	load0       string
	servers     []serverRow
	backends    []*backend
	sleep       time.Duration // what time.Sleep(1ms) takes here
	serials     map[*lib]*serial
	contentions map[*lib]map[int]*contention
	curves      map[string]*curve // backend + "/" + variable
	many        []manyRow
	skipped     []skip // runs left out, and why
	prims       []*primBackend
	primRuns    map[*primLib]*primRun
}

func newReport() *report {
	treeVersion()
	return &report{
		start: time.Now(), load0: loadAvg(),
		serials: map[*lib]*serial{}, contentions: map[*lib]map[int]*contention{}, curves: map[string]*curve{},
		primRuns: map[*primLib]*primRun{},
	}
}

func (r *report) progress(format string, args ...any) {
	fmt.Printf("[%4.0fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

func (r *report) serial(l *lib) *serial {
	if r.serials[l] == nil {
		r.serials[l] = &serial{}
	}
	return r.serials[l]
}

func (r *report) contended(l *lib, workers int) *contention {
	if r.contentions[l] == nil {
		r.contentions[l] = map[int]*contention{}
	}
	if r.contentions[l][workers] == nil {
		r.contentions[l][workers] = &contention{}
	}
	return r.contentions[l][workers]
}

func (r *report) curvePoint(backend, variable, lib string, x, n int, c *contention) {
	key := backend + "/" + variable
	cv := r.curves[key]
	if cv == nil {
		cv = &curve{changes: map[string][]float64{}, p99Ms: map[string][]float64{}}
		r.curves[key] = cv
	}
	if cv.changes[lib] == nil {
		cv.libs = append(cv.libs, lib)
		cv.changes[lib], cv.p99Ms[lib] = nanSlice(n), nanSlice(n)
	}
	if c.grants > 0 {
		if len(c.perWorker) > 1 { // with one worker there is nobody to hand off to
			cv.changes[lib][x] = c.changesPerSec()
		}
		cv.p99Ms[lib][x] = float64(quantile(c.waits, 0.99)) / float64(time.Millisecond)
	}
}

func nanSlice(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// best returns the incumbent of b with the highest value of f, or nil.
func best[T any](b *backend, get func(*lib) T, f func(T) float64) (*lib, T) {
	var bl *lib
	var bv T
	for _, l := range b.libs {
		if l.role != incumbent {
			continue
		}
		v := get(l)
		if bl == nil || f(v) > f(bv) {
			bl, bv = l, v
		}
	}
	return bl, bv
}

func (r *report) write(dir string) error {
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	took := time.Since(r.start)
	p("# dlock side by side: results\n\n")
	p("Written by `make bench` (bench/results_test.go) on %s; the run took %s. ", r.start.UTC().Format("2006-01-02 15:04 MST"), took.Round(time.Second))
	p("Every figure below comes from that one run, with the libraries of a backend interleaved (call by call in A, round by round elsewhere) so that a change of the machine's load affects all alike. ")
	p("Do not edit by hand: run `make bench` again. How each figure is measured is in [README.md](README.md).\n\n")

	p("## Machine\n\n")
	p("| | |\n|---|---|\n")
	p("| CPU | %s, %d logical cores (GOMAXPROCS %d) |\n", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0))
	p("| kernel | %s |\n", kernel())
	p("| load average (1, 5, 15 min) | at start %s; at end %s |\n", r.load0, loadAvg())
	p("| Go | %s %s/%s |\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	p("| time.Sleep(1ms) takes | %v (median) |\n\n", r.sleep.Round(time.Microsecond))
	p("The machine is shared with other work; the load average says how busy it was.\n\n")

	p("## Servers\n\n| server | version | settings |\n|---|---|---|\n")
	for _, s := range r.servers {
		p("| %s | %s | %s |\n", s.name, s.version, s.settings)
	}
	p("\nAll on 127.0.0.1, started by the run in temporary directories. The disks' sync latency is taken out (tmpfs, fsync off) so that the figures measure the client libraries and protocols, not a shared disk.\n\n")

	p("## Libraries\n\n| backend | library | module version | how it is used |\n|---|---|---|---|\n")
	for _, b := range r.backends {
		for _, l := range b.libs {
			p("| %s | %s | %s | %s |\n", b.name, l.name, libVersion(l), l.how)
		}
	}
	p("\nSettings: TTL %v (redsync's default expiry) in A and B; critical section %v in B; ", ttl, hold)
	p("A: %d rounds of %v per library, the libraries' calls interleaved one by one in random order; B: %d rounds × %v per library with 8 or 32 workers, × %v with 64 (after a %v warm-up); curves: %v per point; C: TTL %v, %d workers (%d for the %d-name runs). ", roundsA, scaled(eachA), roundsB, roundB(8), roundB(64), scaled(warmUp), scaled(eachPoint), ttlC, workersC, *millionW, *largeN)
	p("Each worker has its own client and connection(s), as a separate process would.\n\n")

	if *manyOnly {
		p("This run measured only scenario C (`-many-only`, make bench-million): each library of `-million` holds its small number of names, then %d. Its other figures are in RESULTS.md, from `make bench`.\n\n", *largeN)
		p("## Goals\n\n| goal | this run | met |\n|---|---|---|\n")
		for _, g := range r.notRun(r.millionGoals()) {
			p("| %s | %s | %s |\n", g.what, g.got, g.verdict)
		}
		p("\n")
		r.writeC(p)
		return os.WriteFile(filepath.Join(dir, "RESULTS.md"), []byte(w.String()), 0o644)
	}
	r.writeHeadline(p)
	r.writeGoals(p)
	r.writeA(p)
	r.writeB(p)
	r.writeC(p)
	r.writeD(p)
	r.writeP(p)
	if err := r.writeCurves(dir, p); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "RESULTS.md"), []byte(w.String()), 0o644)
}

func (r *report) backend(name string) *backend {
	for _, b := range r.backends {
		if b.name == name {
			return b
		}
	}
	return nil
}

func (r *report) lib(backend, name string) *lib {
	if b := r.backend(backend); b != nil {
		for _, l := range b.libs {
			if l.name == name {
				return l
			}
		}
	}
	return nil
}

// goal is one target and what this run made of it: the figure, and met
// or missed.
type goal struct{ what, got, verdict string }

// heapGoal is the goal of at most 1 KiB of client heap and no goroutine
// per held lock, on scenario C's figures; errors counts the calls that
// failed.
func heapGoal(what string, heapPerLock, goroutinesPerLock float64, errors int) goal {
	g := goal{what: what, got: fmt.Sprintf("%.0f B, %.2f goroutines", heapPerLock, goroutinesPerLock), verdict: "yes"}
	if math.Abs(goroutinesPerLock) < 0.005 { // as C's table rounds: earlier clients' goroutines may end meanwhile
		g.got = fmt.Sprintf("%.0f B, 0.00 goroutines", heapPerLock)
	}
	var why []string
	if heapPerLock > 1024 {
		why = append(why, fmt.Sprintf("heap %.2f× 1 KiB", heapPerLock/1024))
	}
	if math.Abs(goroutinesPerLock) >= 0.005 {
		why = append(why, "goroutines held")
	}
	if errors > 0 {
		why = append(why, fmt.Sprintf("%d calls failed", errors))
	}
	if len(why) > 0 {
		g.verdict = "**missed**: " + strings.Join(why, "; ")
	}
	return g
}

// numGoal is a goal on a figure: met when got >= target (got <= target if
// atMost); measured is false when the run has no figure for it, which
// misses the goal.
func numGoal(what string, got, target float64, atMost bool, unit string, measured bool) goal {
	g := goal{what: what, got: fmt.Sprintf("%.3f%s", got, unit), verdict: "yes"}
	switch {
	case !measured:
		g.got, g.verdict = "–", "**missed**: not measured in this run"
	case atMost && got > target:
		g.verdict = fmt.Sprintf("**missed** by %.1f%%", (got/target-1)*100)
	case !atMost && got < target:
		g.verdict = fmt.Sprintf("**missed** by %.1f%%", (1-got/target)*100)
	}
	return g
}

// missed is a goal this run could not meet, and why.
func missed(what, got, why string) goal {
	return goal{what: what, got: got, verdict: "**missed**: " + why}
}

// ceiling is 1 ÷ (what time.Sleep(hold) takes + the floor's pair of round
// trips, scenario D): B's ceiling, the holder changes/s of a hand-off that
// costs the release and one message.
func (r *report) ceiling(b *backend) float64 {
	floorPair := time.Duration(0)
	if fs := r.serial(b.floor()); fs.ops > 0 {
		floorPair = time.Duration(float64(time.Second) / fs.opsPerSec())
	}
	return 1 / (r.sleep + floorPair).Seconds()
}

// libsOf are the libraries of b in role ro; none if b is nil.
func libsOf(b *backend, ro role) []*lib {
	if b == nil {
		return nil
	}
	var ls []*lib
	for _, l := range b.libs {
		if l.role == ro {
			ls = append(ls, l)
		}
	}
	return ls
}

// manyRun is l's scenario C run with n names, or nil.
func (r *report) manyRun(l *lib, n int) *manyKeys {
	for _, m := range r.many {
		if m.lib == l && m.m.n == n {
			return m.m
		}
	}
	return nil
}

// goalName is how the goals name a backend.
var goalName = map[string]string{"redis": "Redis", "etcd": "etcd", "zookeeper": "ZooKeeper", "postgres": "PostgreSQL", "mariadb": "MariaDB", "temporal": "Temporal"}

func (r *report) writeGoals(p func(string, ...any)) {
	ratio := func(what string, a, b float64, target float64, atMost bool) goal {
		return numGoal(what, a/b, target, atMost, "×", a > 0 && b > 0)
	}
	ops := func(backend, name string) float64 {
		if l := r.lib(backend, name); l != nil && r.serials[l] != nil {
			return r.serials[l].opsPerSec()
		}
		return 0
	}
	cont := func(backend, name string, n int) *contention {
		if l := r.lib(backend, name); l != nil && r.contentions[l] != nil && r.contentions[l][n] != nil {
			return r.contentions[l][n]
		}
		return &contention{elapsed: time.Second, perWorker: []int{0}}
	}
	// timesCeiling is the goal that name's holder changes/s with n workers
	// be at least target × the backend's ceiling.
	timesCeiling := func(backend, name string, n int, target float64) goal {
		what := fmt.Sprintf("%s contended (%d workers), %s holder changes/s ÷ ceiling ≥ %.1f", goalName[backend], n, name, target)
		b := r.backend(backend)
		if b == nil {
			return numGoal(what, 0, target, false, "×", false)
		}
		c := cont(backend, name, n)
		return numGoal(what, c.changesPerSec()/r.ceiling(b), target, false, "×", c.grants > 0)
	}
	fairness := func(backend, name string, n int) goal {
		c := cont(backend, name, n)
		return numGoal(fmt.Sprintf("fairness (fewest ÷ most grants per worker), %s %s, %d workers ≥ 0.9", backend, name, n), c.fairness(), 0.9, false, "", c.grants > 0)
	}
	// fairGoals are the goals of a backend's fair mode, contended with 8
	// workers: × ceiling, and fairness if withFairness; or why there is no
	// figure.
	fairGoals := func(backend string, target float64, withFairness bool) []goal {
		what := fmt.Sprintf("%s contended (8 workers), fair mode: holder changes/s ÷ ceiling ≥ %.1f", goalName[backend], target)
		if withFairness {
			what = fmt.Sprintf("%s contended (8 workers), fair mode: fairness ≥ 0.9 and holder changes/s ÷ ceiling ≥ %.1f", goalName[backend], target)
		}
		b := r.backend(backend)
		switch {
		case b == nil:
			return []goal{missed(what, "–", "not measured by make bench")}
		case r.lib(backend, "dlock-fair") != nil && withFairness:
			return []goal{fairness(backend, "dlock-fair", 8), timesCeiling(backend, "dlock-fair", 8, target)}
		case r.lib(backend, "dlock-fair") != nil:
			return []goal{timesCeiling(backend, "dlock-fair", 8, target)}
		}
		for _, l := range libsOf(b, ours) {
			if l.caps != nil && !l.caps.Fair {
				return []goal{missed(what, "–", "no fair mode (the driver's Capabilities().Fair is false)")}
			}
		}
		return []goal{missed(what, "–", "no dlock-fair library in this run")}
	}

	// The current round.
	var cur []goal
	for _, name := range allBackends {
		b := r.backend(name)
		if b == nil {
			cur = append(cur, missed(fmt.Sprintf("client heap per held lock ≤ 1 KiB and 0 goroutines per held lock (C), %s dlock", name), "not run", "not in -backends"))
			continue
		}
		for _, l := range libsOf(b, ours) {
			what := fmt.Sprintf("client heap per held lock ≤ 1 KiB and 0 goroutines per held lock, %d names (C), %s %s", b.keysSmall(), b.name, l.name)
			m := r.manyRun(l, b.keysSmall())
			if m == nil {
				cur = append(cur, numGoal(what, 0, 0, true, "", false))
				continue
			}
			cur = append(cur, heapGoal(what, m.heapPerLock, m.goroutinesPerLock, m.errors))
			if m.shed {
				cur = append(cur, heapGoal(fmt.Sprintf("client heap per held lock ≤ 1 KiB and 0 goroutines per held lock, %d names (C), %s %s, measured again with %s, the locks still held (restated goal: the lock's own cost in its client)",
					b.keysSmall(), b.name, l.name, l.shedWhat), m.shedHeapPerLock, m.shedGoroutinesPerLock, m.shedErrors))
			}
		}
	}
	cur = append(cur, r.millionGoals()...)
	cur = append(cur, fairGoals("postgres", 0.7, true)...)
	// The ceiling counts a bare round trip's time for the NOTIFY that tells
	// the next holder; the NOTIFY ring measures what PostgreSQL's own
	// hand-off by NOTIFY costs, and the fair mode is measured against it
	// too.
	if what := "PostgreSQL contended (8 workers), dlock-fair holder changes/s ÷ the NOTIFY ring's (reference: update + pg_notify → the next worker's listener) ≥ 0.7"; r.lib("postgres", "reference: NOTIFY ring") == nil {
		cur = append(cur, missed(what, "–", "this run has no such reference"))
	} else {
		cur = append(cur, ratio(what, cont("postgres", "dlock-fair", 8).changesPerSec(), cont("postgres", "reference: NOTIFY ring", 8).changesPerSec(), 0.7, false))
	}
	cur = append(cur, timesCeiling("postgres", "dlock-plain", 8, 0.5))
	cur = append(cur, fairGoals("mariadb", 0.5, true)...)
	for _, l := range libsOf(r.backend("mariadb"), ours) {
		if l.name == "dlock-fair" {
			continue
		}
		c := cont("mariadb", l.name, 8)
		cur = append(cur, numGoal(fmt.Sprintf("MariaDB contended (8 workers), %s (plain) holder changes ÷ grants ≥ 0.5", l.name),
			float64(c.changes)/float64(max(c.grants, 1)), 0.5, false, "", c.grants > 0))
	}
	for _, f := range []struct {
		backend string
		target  float64
	}{{"mariadb", 2}, {"postgres", 1.5}} {
		for _, fl := range libsOf(r.backend(f.backend), floor) {
			for _, l := range libsOf(r.backend(f.backend), ours) {
				cur = append(cur, ratio(fmt.Sprintf("%s uncontended lock+unlock, %s time ÷ floor (%s) ≤ %.1f", goalName[f.backend], l.name, fl.name, f.target),
					r.serial(fl).opsPerSec(), r.serial(l).opsPerSec(), f.target, true))
			}
		}
		// Both engines commit each write: the least a fenced lock with an
		// owner-checked release costs, two one-row commits, measured
		// beside the floor, shows how close to the floor a lock can come,
		// and how far dlock is from it (the restated goal, as Redis's).
		what := fmt.Sprintf("%s uncontended, the fenced minimum's time (reference: two one-row commits) ÷ floor: the least the goal above can reach", goalName[f.backend])
		b := r.backend(f.backend)
		if b == nil {
			continue
		}
		ref, fl := r.lib(f.backend, "reference: fenced minimum"), b.floor()
		if ref == nil || fl == nil {
			cur = append(cur, missed(what, "–", "this run has no fenced-minimum reference"))
			continue
		}
		cur = append(cur, goal{what: what, got: ratioCell(ops(f.backend, fl.name), ops(f.backend, ref.name)), verdict: "reference, not a goal"})
		for _, l := range libsOf(b, ours) {
			cur = append(cur, ratio(fmt.Sprintf("%s uncontended lock+unlock, %s time ÷ the fenced minimum's (reference: two one-row commits) ≤ 1.05 (restated goal)", goalName[f.backend], l.name),
				ops(f.backend, ref.name), ops(f.backend, l.name), 1.05, true))
		}
	}
	var fenced *lib
	if refs := libsOf(r.backend("redis"), reference); len(refs) > 0 {
		fenced = refs[0]
	}
	for _, l := range libsOf(r.backend("redis"), ours) {
		cur = append(cur, ratio("Redis uncontended lock+unlock, "+l.name+" ÷ bsm/redislock (ops/s) ≥ 1.0", ops("redis", l.name), ops("redis", "bsm-linear1ms"), 1.0, false))
		what := "Redis uncontended lock+unlock, " + l.name + " time ÷ the fenced minimum's (reference: INCR + SET NX PX, GET + compare + DEL) ≤ 1.05"
		if fenced == nil {
			cur = append(cur, missed(what, "–", "this run has no fenced-minimum reference"))
			continue
		}
		cur = append(cur, ratio(what, ops("redis", fenced.name), ops("redis", l.name), 1.05, true))
	}
	for _, l := range libsOf(r.backend("redis"), ours) {
		c := cont("redis", l.name, 8)
		cur = append(cur, numGoal("Redis contended (8 workers), "+l.name+" commands executed per grant (INFO commandstats, scripts' included) ≤ 10", c.callsPerGrant(), 10, true, "", c.grants > 0 && c.calls > 0))
	}
	for _, n := range []int{8, 64} {
		cur = append(cur, timesCeiling("etcd", "dlock", n, 0.9))
	}
	// etcd's ceiling counts two commits per hand-off, where a queue lock's
	// hand-off is one commit and a watch event: the raw hand-off reference
	// measures that chain, and dlock is measured against it too.
	for _, ref := range []struct{ name, chain string }{
		{"reference: raw hand-off", "delete → watch event → next holder"},
		{"reference: raw hand-off + read", "delete → watch event → one read → next holder"},
	} {
		for _, n := range []int{8, 64} {
			what := fmt.Sprintf("etcd contended (%d workers), dlock holder changes/s ÷ the %s's (%s) ≥ 0.9", n, strings.TrimPrefix(ref.name, "reference: "), ref.chain)
			if r.lib("etcd", ref.name) == nil {
				cur = append(cur, missed(what, "–", "this run has no such reference"))
				continue
			}
			cur = append(cur, ratio(what, cont("etcd", "dlock", n).changesPerSec(), cont("etcd", ref.name, n).changesPerSec(), 0.9, false))
		}
	}
	cur = append(cur, ratio("etcd contended (64 workers) grants/s, dlock ÷ concurrency.Mutex ≥ 2", cont("etcd", "dlock", 64).grantsPerSec(), cont("etcd", "concurrency.Mutex", 64).grantsPerSec(), 2, false))
	// What the goal above could reach at most: the raw hand-off does less
	// than any queue lock on etcd can, so where it is under 2×
	// concurrency.Mutex, so is every lock.
	if r.lib("etcd", "reference: raw hand-off") != nil && r.lib("etcd", "concurrency.Mutex") != nil {
		if raw, mu := cont("etcd", "reference: raw hand-off", 64), cont("etcd", "concurrency.Mutex", 64); raw.grants > 0 && mu.grants > 0 {
			cur = append(cur, goal{what: "etcd contended (64 workers) grants/s, the reference raw hand-off ÷ concurrency.Mutex: the most the goal above can reach",
				got: fmt.Sprintf("%.3f×", raw.grantsPerSec()/mu.grantsPerSec()), verdict: "reference, not a goal"})
		}
	}
	cur = append(cur, r.temporalGoals()...)

	// Goals of the earlier round that the current one does not restate.
	var old []goal
	fair, rsync, bsm8 := cont("redis", "dlock-fair", 8), cont("redis", "redsync", 8), cont("redis", "bsm-linear1ms", 8)
	old = append(old, ratio("Redis contended (8 workers) holder changes/s, dlock-fair ÷ redsync ≥ 25", fair.changesPerSec(), rsync.changesPerSec(), 25, false))
	old = append(old, ratio("Redis contended (8 workers) holder changes/s, dlock-fair ÷ bsm LinearBackoff(1ms) ≥ 1.2", fair.changesPerSec(), bsm8.changesPerSec(), 1.2, false))
	fair64, bsm64 := cont("redis", "dlock-fair", 64), cont("redis", "bsm-linear1ms", 64)
	old = append(old, ratio("Redis contended (64 workers) commands/grant (executed, scripts' included), dlock-fair ÷ bsm LinearBackoff(1ms) ≤ 0.1", fair64.callsPerGrant(), bsm64.callsPerGrant(), 0.1, true))
	old = append(old, ratio("Redis contended (64 workers) requests sent/grant, dlock-fair ÷ bsm LinearBackoff(1ms) ≤ 0.1", fair64.reqsPerGrant(), bsm64.reqsPerGrant(), 0.1, true))
	old = append(old, ratio("etcd uncontended lock+unlock, dlock ÷ concurrency.Mutex (ops/s) ≥ 1.0", ops("etcd", "dlock"), ops("etcd", "concurrency.Mutex"), 1.0, false))
	old = append(old, ratio("etcd contended (8 workers) grants/s, dlock ÷ concurrency.Mutex ≥ 3", cont("etcd", "dlock", 8).grantsPerSec(), cont("etcd", "concurrency.Mutex", 8).grantsPerSec(), 3, false))
	old = append(old, ratio("ZooKeeper uncontended lock+unlock, dlock ÷ zk.Lock (ops/s) ≥ 1.0", ops("zookeeper", "dlock"), ops("zookeeper", "zk.Lock"), 1.0, false))
	old = append(old, ratio("ZooKeeper contended (8 workers) grants/s, dlock ÷ zk.Lock ≥ 1.2", cont("zookeeper", "dlock", 8).grantsPerSec(), cont("zookeeper", "zk.Lock", 8).grantsPerSec(), 1.2, false))
	for _, f := range []struct{ backend, lib string }{{"redis", "dlock-fair"}, {"etcd", "dlock"}, {"zookeeper", "dlock"}} {
		for _, n := range []int{8, 64} {
			old = append(old, fairness(f.backend, f.lib, n))
		}
	}

	cur, old = r.notRun(cur), r.notRun(old)

	p("## Goals\n\n")
	p("Ceiling and floor as in B and A: the ceiling is 1 ÷ (what time.Sleep(%v) takes + the floor's pair of round trips), the floor the backend's raw round trips of D. ", hold)
	p("A goal on a backend or a mode this run does not measure is missed, and says why.\n\n")
	for _, t := range []struct {
		title string
		gs    []goal
	}{{"Current round", cur}, {"Earlier round, still held", old}} {
		p("### %s\n\n| goal | this run | met |\n|---|---|---|\n", t.title)
		for _, g := range t.gs {
			p("| %s | %s | %s |\n", g.what, g.got, g.verdict)
		}
		p("\n")
	}
	p("The earlier round's Redis goals of 1.2× two PINGs uncontended, and of 1/10 of bsm/redislock's commands and requests per grant at 8 workers, gave way to the current round's fenced-minimum and commands-per-grant goals. Why a goal is missed, where one is, is discussed in [README.md](README.md#reading-the-results).\n\n")
}

// millionGoals are the goals that every backend hold a million names
// at once (scenario C with -large names, for the libraries of -million).
func (r *report) millionGoals() []goal {
	var gs []goal
	for _, name := range allBackends {
		what := fmt.Sprintf("a million names held at once: %s runs C with %d names", goalName[name], keysCLarge)
		b := r.backend(name)
		if b == nil {
			gs = append(gs, missed(what, "not run", "not in -backends"))
			continue
		}
		var ran, failed, skipped []string
		for _, l := range b.lockLibs() {
			m := r.manyRun(l, keysCLarge)
			switch {
			case m != nil && (m.errors > 0 || m.unlockErrors > 0 || m.stopped != ""):
				failed = append(failed, fmt.Sprintf("%s (%d of %d names held%s)", l.name, m.held, m.n, m.stoppedNote()))
			case m != nil && l.role == ours:
				ran = append(ran, fmt.Sprintf("%s, %d workers: %.0f locks/s, %.0f unlocks/s, %.0f B of client heap and %.0f B of the machine's memory per held lock", l.name, m.workers, m.lockPerSec(), m.freePerSec(), m.heapPerLock, m.machinePerLock))
			case m == nil && b.manyKey && inMillion(b, l):
				for _, sk := range r.skipped {
					if sk.lib == l {
						skipped = append(skipped, sk.why)
					}
				}
			}
		}
		switch {
		case len(ran) > 0:
			gs = append(gs, goal{what: what, got: "ran: " + strings.Join(ran, "; "), verdict: "yes"})
		case len(failed) > 0:
			gs = append(gs, missed(what, "ran: "+strings.Join(failed, "; "), "not every name was held"))
		case len(skipped) > 0:
			gs = append(gs, missed(what, "not run", "left out: "+strings.Join(skipped, "; ")))
		case !b.manyKey:
			gs = append(gs, missed(what, "not run", "scenario C does not run on this backend"))
		case *largeN != keysCLarge:
			gs = append(gs, missed(what, "not run", fmt.Sprintf("-large is %d", *largeN)))
		default:
			gs = append(gs, missed(what, "not run", "not in the -million list"))
		}
	}
	return gs
}

// temporalGoals are Temporal's goals: its fair mode (the mutex workflow)
// with 8 workers within 0.7 of the ceiling, and with 32 at least half the
// holder changes/s of 8; each beside the same goal applied to the raw
// hand-off reference, which shows what the server allows.
func (r *report) temporalGoals() []goal {
	// within2x is the 32 ÷ 8 goal applied to l.
	within2x := func(what string, l *lib) goal {
		if l == nil {
			return missed(what, "–", "this run has no such reference")
		}
		x8, x32 := r.contended(l, 8), r.contended(l, 32)
		return numGoal(what, x32.changesPerSec()/max(x8.changesPerSec(), 1e-9), 0.5, false, "×", x8.grants > 0 && x32.elapsed > 0)
	}
	c8 := r.contended(r.lib("temporal", "dlock-fair"), 8)
	gs := []goal{numGoal("Temporal contended (8 workers), fair mode: holder changes/s ÷ ceiling ≥ 0.7", 0, 0.7, false, "×", false)}
	// The raw hand-off reference passes a turn with the fewest updates a
	// hand-off can take (a held take, a give), with no lease or token: the
	// same two goals applied to it say what the server allows at all.
	ref := r.lib("temporal", "reference: raw hand-off")
	refWhat8 := "Temporal contended (8 workers), the raw hand-off reference (a held take and a give per hand-off, no lease): holder changes/s ÷ ceiling ≥ 0.7"
	gs = append(gs, missed(refWhat8, "–", "this run has no such reference"))
	if b := r.backend("temporal"); b != nil {
		gs[0] = numGoal(gs[0].what, c8.changesPerSec()/r.ceiling(b), 0.7, false, "×", c8.grants > 0)
		if ref != nil {
			r8 := r.contended(ref, 8)
			gs[1] = numGoal(refWhat8, r8.changesPerSec()/r.ceiling(b), 0.7, false, "×", r8.grants > 0)
		}
	}
	return append(gs,
		within2x("Temporal contended, fair mode: holder changes/s with 32 workers ÷ with 8 ≥ 0.5 (within 2×)", r.lib("temporal", "dlock-fair")),
		within2x(fmt.Sprintf("Temporal contended, the raw hand-off reference (on the server with history.maxInFlightUpdates=%d, which admits its 31 held takes): holder changes/s with 32 workers ÷ with 8 ≥ 0.5", raisedInFlight), ref),
		// The same lock on a server that admits more updates in flight:
		// what the default limit costs when 32 waiters arrive at once.
		within2x(fmt.Sprintf("Temporal contended, fair mode on a server with history.maxInFlightUpdates=%d: holder changes/s with 32 workers ÷ with 8 ≥ 0.5", raisedInFlight), r.lib("temporal", raisedName)))
}

// notRun marks the goals on a backend that -backends left out: not run,
// rather than not measured.
func (r *report) notRun(gs []goal) []goal {
	for i, g := range gs {
		for _, name := range allBackends {
			if r.backend(name) != nil {
				continue
			}
			if strings.HasPrefix(g.what, goalName[name]+" ") || strings.Contains(g.what, ", "+name+" ") {
				gs[i].got, gs[i].verdict = "not run", "**missed**: not in -backends"
			}
		}
	}
	return gs
}

// writeHeadline is the short table the top-level README shows.
func (r *report) writeHeadline(p func(string, ...any)) {
	p("## Headline\n\n| backend | scenario | dlock | incumbents | dlock ÷ best incumbent |\n|---|---|---|---|---|\n")
	for _, b := range r.backends {
		// The first dlock library of the backend (dlock-fair on Redis).
		var ours0 *lib
		for _, l := range b.libs {
			if l.role == ours {
				ours0 = l
				break
			}
		}
		others := func(f func(*lib) float64, unit string) (string, float64) {
			var cells []string
			bestV := 0.0
			for _, l := range b.libs {
				if l.role == incumbent {
					v := f(l)
					cells = append(cells, fmt.Sprintf("%s %s%s", l.name, num(v), unit))
					bestV = max(bestV, v)
				}
			}
			if len(cells) == 0 {
				return "–", 0
			}
			return strings.Join(cells, "; "), bestV
		}
		row := func(scenario string, f func(*lib) float64, unit string, floorNote string) {
			inc, bestV := others(f, unit)
			v := f(ours0)
			ratio := ratioCell(v, bestV)
			if floorNote != "" {
				ratio = floorNote
			}
			p("| %s | %s | %s%s | %s | %s |\n", b.name, scenario, num(v), unit, inc, ratio)
		}
		fl := r.serial(b.floor())
		uncontended := func(l *lib) float64 { return r.serial(l).opsPerSec() }
		note := ""
		if bestLib, _ := best(b, r.serial, (*serial).opsPerSec); bestLib == nil {
			note = "time ÷ floor " + ratioCell(fl.opsPerSec(), r.serial(ours0).opsPerSec())
		}
		row(ours0.name+": uncontended lock+unlock", uncontended, " ops/s", note)
		for _, n := range b.bWorkers {
			row(fmt.Sprintf("%s: contended, %d workers, 1 ms held", ours0.name, n), func(l *lib) float64 { return r.contended(l, n).changesPerSec() }, " changes/s", "")
		}
		for _, m := range r.many {
			if m.lib == ours0 && m.m.n == b.keysSmall() {
				row(fmt.Sprintf("%s: heap per held lock, %d names", ours0.name, b.keysSmall()), func(l *lib) float64 {
					for _, m := range r.many {
						if m.lib == l && m.m.n == b.keysSmall() {
							return m.m.heapPerLock
						}
					}
					return math.NaN()
				}, " B", "(lower is better)")
			}
		}
	}
	p("\n")
}

func ms(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond))
	}
}

func ratioCell(a, b float64) string {
	if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func (r *report) writeA(p func(string, ...any)) {
	p("## A. Uncontended lock+unlock\n\n")
	p("One worker per library locks and unlocks one name in a loop; the libraries of a backend take turns call by call, in a new random order each time around, so that all meet the same load on the machine. ops/s is 1 ÷ the mean time of a lock+unlock. ÷ best incumbent: ops/s over the best incumbent's on the same backend (higher is better). Time ÷ floor: time per lock+unlock over the backend's raw round trips (scenario D; 1.00× is the physical floor, lower is better). reqs/op: requests the client sent per lock+unlock (Redis commands; etcd unary gRPC calls; not counted for the others). allocs/op: heap allocations per lock+unlock in this process (client side only), counted in a separate pass where the library runs alone.\n\n")
	p("| backend | library | p50 | p99 | ops/s | ÷ best incumbent | time ÷ floor | reqs/op | allocs/op | bytes/op | errors |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, b := range r.backends {
		_, bi := best(b, r.serial, (*serial).opsPerSec)
		fl := r.serial(b.floor())
		for _, l := range b.serialLibs() {
			s := r.serial(l)
			inc := "–"
			if l.role == ours && bi != nil {
				inc = ratioCell(s.opsPerSec(), bi.opsPerSec())
			}
			reqs := "–"
			if s.reqs > 0 {
				reqs = fmt.Sprintf("%.2f", float64(s.reqs)/float64(max(s.ops, 1)))
			}
			p("| %s | %s | %s | %s | %.0f | %s | %s | %s | %.0f | %.0f | %d |\n", b.name, l.name,
				ms(quantile(s.lat, 0.5)), ms(quantile(s.lat, 0.99)), s.opsPerSec(), inc, ratioCell(fl.opsPerSec(), s.opsPerSec()), reqs,
				float64(s.mallocs)/float64(max(s.allocOps, 1)), float64(s.allocs)/float64(max(s.allocOps, 1)), s.errors)
		}
	}
	p("\n")
}

func (r *report) writeB(p func(string, ...any)) {
	p("## B. Contended: one name, %v critical section\n\n", hold)
	p("Holder changes/s: grants to a different worker than the previous grant. Ceiling: 1 ÷ (what time.Sleep(%v) takes + the backend's floor pair of round trips, scenario D) — a hand-off needs at least the release and the message that tells the next holder; × ceiling is holder changes/s over it. ", hold)
	p("Wait: from calling lock to being granted. cmds/grant: commands the Redis server executed per grant (INFO commandstats delta, including those run by scripts); reqs/grant: requests the clients sent per grant (Redis commands; etcd unary gRPC calls, without the watch and keep-alive streams). Gave up: lock calls that returned an error (redsync gives up after 32 tries). PostgreSQL and MariaDB run with 8 workers only; Temporal with 8 and 32 (a Temporal hand-off takes two workflow updates, some 10 ms, so 64 workers would need rounds many times longer to give each worker enough turns).\n\n")
	for _, n := range workersB {
		if !slices.ContainsFunc(r.backends, func(b *backend) bool { return slices.Contains(b.bWorkers, n) }) {
			continue
		}
		p("### %d workers\n\n", n)
		p("| backend | library | grants/s | holder changes/s | ÷ best incumbent | × ceiling | wait p50 | wait p99 | wait max | grants/worker min–max | fairness | cmds/grant | reqs/grant | gave up |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, b := range r.backends {
			if !slices.Contains(b.bWorkers, n) {
				continue
			}
			get := func(l *lib) *contention { return r.contended(l, n) }
			_, bi := best(b, get, (*contention).changesPerSec)
			ceiling := r.ceiling(b)
			for _, l := range b.contendedLibs() {
				c := get(l)
				if c.grants == 0 && c.perWorker == nil {
					continue
				}
				inc := "–"
				if l.role == ours && bi != nil {
					inc = ratioCell(c.changesPerSec(), bi.changesPerSec())
				}
				cmds, reqs := "–", "–"
				if l.redis != nil {
					cmds = fmt.Sprintf("%.2f", c.callsPerGrant())
				}
				if c.reqs > 0 {
					reqs = fmt.Sprintf("%.2f", c.reqsPerGrant())
				}
				waits := c.waits
				p("| %s | %s | %.1f | %.1f | %s | %.2f | %s | %s | %s | %d–%d | %.3f | %s | %s | %d |\n", b.name, l.name,
					c.grantsPerSec(), c.changesPerSec(), inc, c.changesPerSec()/ceiling,
					ms(quantile(waits, 0.5)), ms(quantile(waits, 0.99)), ms(quantile(waits, 1)),
					slices.Min(c.perWorker), slices.Max(c.perWorker), c.fairness(), cmds, reqs, c.errors)
				if c.overlaps > 0 {
					p("| | **%d overlapping grants: two holders at once** | | | | | | | | | | | | |\n", c.overlaps)
				}
			}
		}
		p("\n")
	}
}

func (r *report) writeC(p func(string, ...any)) {
	p("## C. Many names\n\n")
	p("The workers lock N distinct names between them and hold them all; then they unlock them all. Heap and goroutines per held lock: this process's live Go heap (after two GCs) and goroutine count while all N are held, minus before, ÷ N — the client's cost of holding a lock (it includes the benchmark's own closure per lock, a few dozen bytes). Machine memory per held lock: the machine's available memory (/proc/meminfo MemAvailable) before the locks minus while all are held, ÷ N — the client's and the server's cost together, and whatever else the shared machine did meanwhile (noisy for small N). Temporal runs a second time, its SDK's workflow cache purged before the names are locked and while they are held, so that the heap and goroutines per held lock are the lock's own, without the workflows its worker caches (the Goals table has both; the table here has the first). ")
	p("%d names run only for the libraries listed in the settings (`-million`), with %d workers, and only if the run's budget (`-budget`) and the machine's available memory allow (the time and the client's heap estimated from the library's small run); a run stops locking if the available memory falls below %d MiB, rather than let the machine run out. Errors: the Locks that failed, and the Unlocks that failed (for dlock, a lease lost while it was held: those names were not all held at once).\n\n", *largeN, *millionW, minFreeMemory>>20)
	p("| backend | library | names | workers | locks/s | unlocks/s | heap bytes per held lock | machine memory per held lock | goroutines per held lock | errors |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, m := range r.many {
		// A few goroutines of earlier runs' clients may end meanwhile.
		g := fmt.Sprintf("%.2f", m.m.goroutinesPerLock)
		if math.Abs(m.m.goroutinesPerLock) < 0.005 {
			g = "0.00"
		}
		errs := fmt.Sprint(m.m.errors)
		if note := m.m.stoppedNote(); note != "" {
			errs += " (" + strings.TrimPrefix(note, ", ") + ")"
		}
		p("| %s | %s | %d | %d | %.0f | %.0f | %.0f | %.0f B | %s | %s |\n", m.backend, m.lib.name, m.m.n, m.m.workers, m.m.lockPerSec(), m.m.freePerSec(), m.m.heapPerLock, m.m.machinePerLock, g, errs)
	}
	p("\n")
	for _, s := range r.skipped {
		p("Left out: %s.\n\n", s.why)
	}
	if b := r.backend("temporal"); b != nil && b.keysSmall() != keysC {
		p("Temporal runs C with %d names, not %d: each name is a mutex workflow, started by the lock's update-with-start, and at the rate above %d names would take most of the run's time.\n\n", b.keysSmall(), keysC, keysC)
	}
}

func (r *report) writeD(p func(string, ...any)) {
	p("## D. The floor: raw round trips\n\n")
	p("The same measurement as A, with a pair of raw requests on the same kind of connection in place of lock and unlock.\n\n")
	p("| backend | round trips | p50 | p99 | pairs/s |\n|---|---|---|---|---|\n")
	for _, b := range r.backends {
		l := b.floor()
		s := r.serial(l)
		p("| %s | %s | %s | %s | %.0f |\n", b.name, l.how, ms(quantile(s.lat, 0.5)), ms(quantile(s.lat, 0.99)), s.opsPerSec())
	}
	p("\n")
}

func (r *report) writeP(p func(string, ...any)) {
	p("## P. Primitives: semaphore, read-write lock, election\n\n")
	p("Each primitive on each backend that has it (`Capabilities`; memlock and Temporal left out), beside the Go incumbents where there are some. ")
	p("Uncontended: one worker takes and releases a name of its own — a permit of a semaphore of %d, the read-write lock's writer lock, a Campaign and Resign — the libraries of a backend and primitive interleaved call by call for %v each, as in A; ops/s is 1 ÷ the mean time of the pair. ", limitP, scaled(eachPA))
	p("Contended: %d workers on one name, each grant held %v, %d rounds of %v per library after a %v warm-up, the libraries round by round as in B. ", workersP, hold, roundsP, scaled(eachP), scaled(warmUpP))
	p("Semaphore: %d permits; held mean is the number of permits the workers held at once, averaged over the rounds' time (each from its grant to the start of its release), max the most. ", limitP)
	p("Read-write lock: %d of the %d workers read and %d write; reads/s and writes/s apart, and the writers' wait. Election: a grant is a term (Campaign returned, held, Resign), so grants/s is terms/s. ", readersP, workersP, workersP-readersP)
	p("Wait: from the call to the grant. ÷ incumbent: dlock's figure over the incumbent's. Violations: grants that made more holders than the primitive allows (a writer or a leader beside anyone, more than %d permits); they must be 0.\n\n", limitP)
	p("There is no Go incumbent for a semaphore across processes on these engines that we know of (Curator's InterProcessSemaphoreV2 and Redisson's RPermitExpirableSemaphore are Java), so the semaphore rows stand alone; so do the PostgreSQL and MariaDB rows, and ZooKeeper's (go-zookeeper/zk has a lock only).\n\n")
	p("| backend | primitive | library | module version | how it is used |\n|---|---|---|---|---|\n")
	for _, b := range r.prims {
		for _, l := range b.libs {
			v := l.version
			if l.role == ours {
				v = libVersion(&lib{role: ours})
			}
			p("| %s | %s | %s | %s | %s |\n", b.name, l.primitive, l.name, v, l.how)
		}
	}
	p("\n| backend | primitive | library | uncontended p50 | ops/s | ÷ incumbent | contended grants/s | ÷ incumbent | held mean / max | reads/s | writes/s | wait p50 | wait p99 | writers' wait max | grants/worker min–max | gave up | violations |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, b := range r.prims {
		for _, prim := range primitiveNames {
			if slices.Contains(b.unsupported, prim) {
				p("| %s | %s | dlock | not on this backend (`Capabilities`: `ErrUnsupported`) | | | | | | | | | | | | | |\n", b.name, prim)
				continue
			}
			var inc *primRun
			for _, l := range b.libs {
				if l.primitive == prim && l.role == incumbent {
					inc = r.primRun(l)
				}
			}
			for _, l := range b.libs {
				if l.primitive != prim {
					continue
				}
				pr := r.primRun(l)
				ratioA, ratioB := "–", "–"
				if l.role == ours && inc != nil {
					ratioA, ratioB = ratioCell(pr.serial.opsPerSec(), inc.serial.opsPerSec()), ratioCell(pr.grantsPerSec(), inc.grantsPerSec())
				}
				held, reads, writes, writerMax := "–", "–", "–", "–"
				switch prim {
				case semaphore:
					held = fmt.Sprintf("%.2f / %d", pr.meanHeld(), pr.maxHeld)
				case rwmutex:
					reads, writes = fmt.Sprintf("%.1f", pr.readsPerSec()), fmt.Sprintf("%.1f", pr.writesPerSec())
					writerMax = ms(quantile(pr.writerWaits, 1))
				}
				minW, maxW := 0, 0
				if len(pr.perWorker) > 0 {
					minW, maxW = slices.Min(pr.perWorker), slices.Max(pr.perWorker)
				}
				violations := fmt.Sprint(pr.violations)
				if pr.violations > 0 {
					violations = "**" + violations + "**"
				}
				p("| %s | %s | %s | %s | %.0f | %s | %.1f | %s | %s | %s | %s | %s | %s | %s | %d–%d | %d | %s |\n", b.name, prim, l.name,
					ms(quantile(pr.serial.lat, 0.5)), pr.serial.opsPerSec(), ratioA, pr.grantsPerSec(), ratioB, held, reads, writes,
					ms(quantile(pr.waits, 0.5)), ms(quantile(pr.waits, 0.99)), writerMax, minW, maxW, pr.errors+pr.serial.errors, violations)
			}
		}
	}
	p("\n")
}

func (r *report) writeCurves(dir string, p func(string, ...any)) error {
	p("## Curves\n\n")
	p("Holder changes/s and p99 acquire-wait against the number of workers (critical section %v), and against the critical section's length (8 workers), %v per point. With one worker there is nobody to hand off to, so the throughput line starts at 2. Temporal's lines stop at 32 workers: at some 10 ms per hand-off, 64 workers would get too few turns in a point's time to mean anything. PostgreSQL and MariaDB have no curves.\n\n", hold, scaled(eachPoint))
	for _, v := range []struct{ variable, file, title, xTitle string }{
		{"workers", "curves-workers.svg", "Contended lock, 1 ms critical section, against workers", "workers (log 2)"},
		{"hold", "curves-hold.svg", "Contended lock, 8 workers, against the critical section", "critical section"},
	} {
		var panels []panel
		var labels []string
		if v.variable == "workers" {
			for _, n := range curveWorkers {
				labels = append(labels, fmt.Sprint(n))
			}
		} else {
			for _, h := range curveHolds {
				labels = append(labels, fmt.Sprintf("%d ms", h/time.Millisecond))
			}
		}
		var backends []string
		for _, b := range r.backends {
			if r.curves[b.name+"/"+v.variable] != nil {
				backends = append(backends, b.name)
			}
		}
		for _, metric := range []string{"changes", "p99"} {
			for _, bn := range backends {
				cv := r.curves[bn+"/"+v.variable]
				pn := panel{title: bn, xTitle: v.xTitle, xLabels: labels}
				if metric == "changes" {
					pn.yTitle = "holder changes/s"
				} else {
					pn.yTitle = "p99 acquire wait (ms)"
				}
				for _, l := range cv.libs {
					ys := cv.changes[l]
					if metric == "p99" {
						ys = cv.p99Ms[l]
					}
					pn.lines = append(pn.lines, series{name: l, ys: ys})
				}
				panels = append(panels, pn)
			}
		}
		if len(backends) == 0 {
			continue
		}
		if err := writeSVG(filepath.Join(dir, v.file), v.title, len(backends), panels); err != nil {
			return err
		}
		p("![%s](%s)\n\n", v.title, v.file)
		r.writeCurveTable(p, v.variable, backends, labels)
	}
	return nil
}

// writeCurveTable gives the charts' figures as a table.
func (r *report) writeCurveTable(p func(string, ...any), variable string, backends, labels []string) {
	p("<details><summary>figures: holder changes/s / p99 wait (ms)</summary>\n\n| backend | library | %s |\n|---|---|%s\n", strings.Join(labels, " | "), strings.Repeat("---|", len(labels)))
	for _, bn := range backends {
		cv := r.curves[bn+"/"+variable]
		for _, l := range cv.libs {
			var cells []string
			for i := range labels {
				cells = append(cells, fmt.Sprintf("%s / %s", num(cv.changes[l][i]), num(cv.p99Ms[l][i])))
			}
			p("| %s | %s | %s |\n", bn, l, strings.Join(cells, " | "))
		}
	}
	p("\n</details>\n\n")
}

func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// The machine and the versions.

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return runtime.GOOS
	}
	return "Linux " + strings.TrimSpace(string(b))
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// modVersion is the version of a module in this module's go.mod (a test
// binary carries no module information of its own).
func modVersion(path string) string {
	b, err := os.ReadFile("go.mod")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == path {
			return f[1]
		}
	}
	return "?"
}

// treeVersion is the commit of the working tree, read once: newReport
// reads it as the run starts, when it is the tree the run was built from
// (a run of an hour may end after later commits).
var treeVersion = sync.OnceValue(func() string {
	out, err := exec.Command("git", "-C", "..", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "this tree"
	}
	return "dlock " + strings.TrimSpace(string(out))
})

// libVersion is the module version of a library; dlock's is the commit of
// the working tree it was built from.
func libVersion(l *lib) string {
	switch {
	case l.role == ours:
		return treeVersion()
	case l.name == "redsync":
		return "redsync " + modVersion("github.com/go-redsync/redsync/v4")
	case l.name == "bsm-linear1ms":
		return "bsm/redislock " + modVersion("github.com/bsm/redislock")
	case l.name == "concurrency.Mutex":
		return "etcd client " + modVersion("go.etcd.io/etcd/client/v3")
	case l.name == "zk.Lock":
		return "go-zookeeper/zk " + modVersion("github.com/go-zookeeper/zk")
	case l.backend == "redis":
		return "go-redis " + modVersion("github.com/redis/go-redis/v9")
	case l.backend == "etcd":
		return "etcd client " + modVersion("go.etcd.io/etcd/client/v3")
	case l.backend == "zookeeper":
		return "go-zookeeper/zk " + modVersion("github.com/go-zookeeper/zk")
	case l.backend == "postgres":
		return "pgx " + modVersion("github.com/jackc/pgx/v5")
	case l.backend == "mariadb":
		return "go-sql-driver/mysql " + modVersion("github.com/go-sql-driver/mysql")
	case l.backend == "temporal":
		return "Temporal Go SDK " + modVersion("go.temporal.io/sdk")
	}
	return "?"
}

func redisVersion() string {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

func zkVersion(z *testenv.ZooKeeper) string {
	out, err := z.Servers[0].FourLetter("srvr")
	if err != nil {
		return "?"
	}
	line, _, _ := strings.Cut(out, "\n")
	return strings.TrimSpace(strings.TrimPrefix(line, "Zookeeper version:"))
}

func temporalVersion() string {
	bin, err := exec.LookPath("temporal")
	if err != nil {
		bin = "/root/go/bin/temporal"
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

func pgVersion(pg *testenv.Postgres) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", pg.User, pg.Addr, pg.Database))
	if err != nil {
		return "?"
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "?"
	}
	return "PostgreSQL " + v
}

func mariadbVersion(m *testenv.MariaDB) string {
	db, err := sql.Open("mysql", m.DSN(testenv.MariaDBUser, testenv.MariaDBPassword))
	if err != nil {
		return "?"
	}
	defer db.Close()
	var v string
	if err := db.QueryRow("SELECT VERSION()").Scan(&v); err != nil {
		return "?"
	}
	return "MariaDB " + v
}
