package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock/dlock"
)

const benchUsage = `Usage:
  dlock bench [flags]

Measures a backend with --workers clients, each with its own connection as
separate processes would have, in two phases of --duration each:

  uncontended  every worker takes and releases a name of its own
  contended    the workers share --keys names (worker i uses name i mod K)

--primitive says what each name is, and so what a grant is:

  mutex      Lock and Unlock (the default)
  semaphore  Acquire and Unlock of one of --limit permits (default 3)
  rwmutex    RLock or Lock, then Unlock: the first round(--readers × N) of
             the N workers read (default 0.75: 6 of 8), the others write
  election   Campaign and Resign: each grant is a term of leadership

Each grant is held for --hold. Reported per phase: grants and grants per
second (terms per second for the election; reads and writes per second
apart for the rwmutex); acquire latency (from the call to holding the
grant, waiting included) p50, p99 and max, the readers' and the writers'
apart for the rwmutex; hand-off latency (from the moment a holder starts to
release to the moment a worker that was waiting holds the name); for the
semaphore, the mean and the most permits of a name held at once; fairness
(the fewest and most grants one worker got); and violations — more holders
of a name at once than the primitive allows (one; --limit for the
semaphore; a writer beside anyone), or a token not above one granted before
— which must be 0. On a terminal a progress line shows while it runs.

--fair asks for fair waiting (dlock.WithFair: grants in arrival order) on
a backend that has it; the read-write lock and the election ask for it
wherever the backend has it, with or without --fair. Compare the
contended phase's fairness (GRANTS/WORKER min-max) and hand-off with and
without it.

A backend without the primitive (semaphores and read-write locks are not
on every backend: see the README), or without fair waiting when --fair is
given, is refused with the library's error and status 64, before anything
is written.

What it writes: locks named bench/RUN/… (RUN is random, one per run), each
released when taken; at the end it breaks any of them still held. Backends
that keep a fencing counter per name outside the lock (Redis, for one) keep
those of the run's names. Before writing to a backend that is neither the
throwaway etcd nor this user's "dlock dev", it asks on a terminal; without
a terminal it refuses (status 64) unless --yes is given.

Flags:
{{flags}}` + backendHelp + metricsHelp + `
The throwaway etcd runs inside the bench process and shares its CPU.

With --json: {"schema": 1, "backend", "primitive", "fair", "limit", "readers",
"workers", "hold_ms", "duration_per_phase", "phases": [...]}; a figure that
was not measured (the hand-off latency of the uncontended phase, a first
error when there was none, the permits held of any primitive but the
semaphore, the reads and writes of any but the rwmutex) is null, never left
out.

Exit status: 0 when no exclusion was violated, 1 when one was (and only
then), 64 for a usage error or a primitive the backend lacks, 69 when the
backend cannot be reached or failed, 70 when the run itself failed before a
verdict (interrupted, for one).

Example:
  dlock bench
  dlock bench --workers 16 --keys 4 --duration 10s --json
  dlock bench --primitive semaphore --limit 3
  dlock bench --primitive rwmutex --readers 0.9
  dlock bench --backend redis://127.0.0.1:6379/0
`

type benchFlags struct {
	backendFlags
	metrics   metricsFlags
	telemetry dlock.Option // reports to --metrics-addr; nil without it
	workers   int
	keys      int
	duration  time.Duration
	hold      time.Duration
	ttl       time.Duration
	json      bool
	yes       bool
	primitive string
	fair      bool    // dlock.WithFair
	limit     int     // permits of the semaphore
	readers   float64 // the fraction of the rwmutex's workers that read
}

// The primitives dlock bench measures.
const (
	primMutex     = "mutex"
	primSemaphore = "semaphore"
	primRWMutex   = "rwmutex"
	primElection  = "election"
)

var primitives = []string{primMutex, primSemaphore, primRWMutex, primElection}

// latency is a distribution summary, in milliseconds in JSON; with no
// samples the figures are null.
type latency struct {
	Samples int      `json:"samples"`
	P50     *float64 `json:"p50_ms"`
	P99     *float64 `json:"p99_ms"`
	Max     *float64 `json:"max_ms"`
}

type phaseResult struct {
	Phase        string  `json:"phase"`
	Keys         int     `json:"keys"`
	Grants       int     `json:"grants"`
	GrantsPerSec float64 `json:"grants_per_sec"`
	Acquire      latency `json:"acquire"`
	Handoff      latency `json:"handoff"`
	MinGrants    int     `json:"min_grants_per_worker"`
	MaxGrants    int     `json:"max_grants_per_worker"`
	Violations   int     `json:"exclusion_violations"`
	Errors       int     `json:"errors"`
	FirstError   *string `json:"first_error"` // null without errors

	// The semaphore only: permits of a name held at once, the mean over
	// the phase's time and names, and the most.
	PermitsHeldMean *float64 `json:"permits_held_mean"`
	PermitsHeldMax  *int     `json:"permits_held_max"`
	// The rwmutex only: the readers' and the writers' grants and acquire
	// latencies apart (Grants and Acquire count both).
	Reads        *int     `json:"reads"`
	ReadsPerSec  *float64 `json:"reads_per_sec"`
	ReadAcquire  *latency `json:"read_acquire"`
	Writes       *int     `json:"writes"`
	WritesPerSec *float64 `json:"writes_per_sec"`
	WriteAcquire *latency `json:"write_acquire"`
}

type benchReport struct {
	Schema    int           `json:"schema"`
	Backend   string        `json:"backend"`
	Primitive string        `json:"primitive"`
	Fair      bool          `json:"fair"`    // --fair
	Limit     *int          `json:"limit"`   // the semaphore's permits; null for the others
	Readers   *float64      `json:"readers"` // the rwmutex's fraction of readers; null for the others
	Workers   int           `json:"workers"`
	HoldMS    float64       `json:"hold_ms"`
	Duration  string        `json:"duration_per_phase"`
	Phases    []phaseResult `json:"phases"`
}

// benchCmd is dlock bench: status 1 for an exclusion violation only, 70
// when the run itself failed.
func benchCmd(ctx context.Context, env *cmdEnv, args []string) error {
	return checkerStatus(benchRun(ctx, env, args))
}

func benchRun(ctx context.Context, env *cmdEnv, args []string) error {
	var f benchFlags
	fs := newFlagSet("dlock bench", benchUsage, env.stdout)
	f.register(fs)
	fs.IntVar(&f.workers, "workers", 8, "number of clients `N`")
	fs.IntVar(&f.keys, "keys", 1, "lock names `K` the contended phase spreads the workers over")
	fs.DurationVar(&f.duration, "duration", 5*time.Second, "length `D` of each phase")
	fs.DurationVar(&f.hold, "hold", time.Millisecond, "time `D` each grant holds the lock")
	fs.DurationVar(&f.ttl, "ttl", 15*time.Second, "lease length")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of a table")
	fs.BoolVar(&f.yes, "yes", false, "write to a backend other than the throwaway etcd or dlock dev without asking")
	fs.BoolVar(&f.yes, "y", false, "short for --yes")
	fs.StringVar(&f.primitive, "primitive", primMutex, "what to measure: `P` is mutex, semaphore, rwmutex or election")
	f.limit = 3
	fs.Var((*permitsFlag)(&f.limit), "limit", fmt.Sprintf("permits `N` of each semaphore with --primitive semaphore (1..%d)", dlock.MaxPermits))
	fs.BoolVar(&f.fair, "fair", false, "grant in arrival order (dlock.WithFair), on a backend that can")
	fs.Float64Var(&f.readers, "readers", 0.75, "with --primitive rwmutex, the fraction `F` of the workers that read (0 to 1)")
	f.metrics.register(fs, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	switch {
	case fs.NArg() > 0:
		return usageErrorf("unexpected argument %q", fs.Arg(0))
	case !slices.Contains(primitives, f.primitive):
		return usageErrorf("--primitive %q: want mutex, semaphore, rwmutex or election", f.primitive)
	case set["limit"] && f.primitive != primSemaphore:
		return usageErrorf("--limit is the semaphore's: give it with --primitive semaphore")
	case set["readers"] && f.primitive != primRWMutex:
		return usageErrorf("--readers is the read-write lock's: give it with --primitive rwmutex")
	case !(f.readers >= 0 && f.readers <= 1):
		return usageErrorf("--readers %v: want a fraction from 0 to 1", f.readers)
	case f.workers < 1 || f.workers > 1000:
		return usageErrorf("--workers %d: want 1 to 1000", f.workers)
	case f.keys < 1 || f.keys > f.workers:
		return usageErrorf("--keys %d: want 1 to --workers (%d)", f.keys, f.workers)
	case f.duration <= 0:
		return usageErrorf("--duration %v: must be positive", f.duration)
	case f.hold < 0:
		return usageErrorf("--hold %v: must not be negative", f.hold)
	case f.ttl <= 0:
		return usageErrorf("--ttl %v: must be positive", f.ttl)
	}
	if f.metrics.addr != "" {
		if _, _, err := f.metrics.check(); err != nil {
			return err
		}
	}
	b, err := f.ownOrEmbedded(ctx, env, env.stderr)
	if err != nil {
		return err
	}
	defer b.Close()
	metrics, err := f.metrics.start(env, b.url)
	if err != nil {
		return err
	}
	defer metrics.Close()
	f.telemetry = metrics.option()
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	prefix := "bench/" + hex.EncodeToString(suffix[:])
	if err := confirmWrites(env, "bench", b, fmt.Sprintf("locks named %s/…, each released before it ends (a backend's fencing counter of a name may stay)", prefix), f.yes); err != nil {
		return err
	}
	clients, err := f.openClients(ctx, b)
	for _, c := range clients {
		defer c.Close()
	}
	if err != nil {
		return err
	}
	if err := f.unsupported(ctx, clients[0], prefix+"/probe"); err != nil {
		return withStatus(exitUsage, fmt.Errorf("--primitive %s: backend %s: %w", f.primitive, b, err))
	}

	var progress io.Writer
	if askable(os.Stderr) && !f.json {
		progress = env.stderr
	}
	defer f.breakLeftovers(ctx, env, clients[0], b, prefix+"/")
	rep := benchReport{Schema: jsonSchema, Backend: b.String(), Primitive: f.primitive, Fair: f.fair, Workers: f.workers, HoldMS: ms(f.hold), Duration: f.duration.String()}
	switch f.primitive {
	case primSemaphore:
		rep.Limit = &f.limit
	case primRWMutex:
		rep.Readers = &f.readers
	}
	for _, phase := range []struct {
		name string
		keys int
	}{{"uncontended", f.workers}, {"contended", f.keys}} {
		r, err := f.runPhase(ctx, clients, phase.name, phase.keys, prefix+"/"+phase.name+"/", progress)
		if err != nil {
			return err
		}
		rep.Phases = append(rep.Phases, r)
	}
	if f.json {
		err = writeJSON(env.stdout, rep)
	} else {
		err = f.printTable(env.stdout, rep)
	}
	if err != nil {
		return err
	}
	for _, p := range rep.Phases {
		if p.Violations > 0 {
			return withStatus(exitViolation, fmt.Errorf("%d exclusion violations of the %s in the %s phase", p.Violations, f.primitive, p.Phase))
		}
	}
	return nil
}

// breakLeftovers breaks the locks under prefix that are still held (a
// release that failed), so that the run leaves no lock behind.
func (f *benchFlags) breakLeftovers(ctx context.Context, env *cmdEnv, c *dlock.Client, b *backend, prefix string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.timeout)
	defer cancel()
	infos, err := c.List(ctx, prefix)
	if err != nil {
		fmt.Fprintf(env.stderr, "dlock bench: could not check for locks left under %s: %v\n", prefix, b.failed(err))
		return
	}
	for _, in := range infos {
		if !in.Held {
			continue
		}
		if err := c.Break(ctx, in.Name); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
			fmt.Fprintf(env.stderr, "dlock bench: could not free %s: %v\n", shown(in.Name), err)
		}
	}
}

// openClients opens one client per worker, each its own connection.
func (f *benchFlags) openClients(ctx context.Context, b *backend) ([]*dlock.Client, error) {
	clients := make([]*dlock.Client, f.workers)
	errs := make([]error, f.workers)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			clients[i], errs[i] = f.open(ctx, b, dlock.WithTTL(f.ttl), f.telemetry)
		})
	}
	wg.Wait()
	opened := slices.DeleteFunc(clients, func(c *dlock.Client) bool { return c == nil })
	return opened, errors.Join(errs...)
}

// unsupported is the library's refusal of f.primitive on c's backend, or
// nil where the backend has it. Only a call the library refuses is made,
// and the library refuses it before any I/O: nothing is written.
func (f *benchFlags) unsupported(ctx context.Context, c *dlock.Client, name string) error {
	caps := c.Capabilities()
	var err error
	switch {
	case f.fair && !caps.Fair:
		_, err = c.Mutex(name, dlock.WithFair()).TryLock(ctx)
	case f.primitive == primSemaphore && f.limit > 1 && !caps.Semaphore:
		_, err = c.Semaphore(name, f.limit).TryAcquire(ctx)
	case f.primitive == primRWMutex && !caps.RWMutex:
		_, err = c.RWMutex(name).TryLock(ctx)
	}
	return err
}

// benchKey is the shared state of one name, to check exclusion and measure
// hand-offs and the permits held.
type benchKey struct {
	mu          sync.Mutex
	holders     int // grants held now: readers and writers, or permits
	writers     int // of which exclusive (a writer of the rwmutex)
	maxHolders  int
	heldArea    float64 // holders integrated over time, in holder-seconds
	changed     time.Time
	maxToken    uint64 // the highest token recorded
	writerToken uint64 // the highest token of an exclusive grant
	lastRelease time.Time
}

// held adds the holders since the last change to the area, at now.
func (k *benchKey) held(now time.Time) {
	if !k.changed.IsZero() {
		k.heldArea += float64(k.holders) * now.Sub(k.changed).Seconds()
	}
	k.changed = now
}

type workerStats struct {
	reader     bool // the rwmutex's: this worker reads
	grants     int
	acquire    []time.Duration
	handoff    []time.Duration
	violations int
	errors     int
	firstErr   error
}

func (f *benchFlags) runPhase(ctx context.Context, clients []*dlock.Client, phase string, nkeys int, prefix string, progress io.Writer) (phaseResult, error) {
	keys := make([]*benchKey, nkeys)
	for i := range keys {
		keys[i] = &benchKey{}
	}
	pctx, cancel := context.WithTimeout(ctx, f.duration)
	defer cancel()
	var total atomic.Int64
	stats := make([]workerStats, len(clients))
	nreaders := 0
	if f.primitive == primRWMutex {
		nreaders = int(math.Round(f.readers * float64(len(clients))))
	}
	var wg sync.WaitGroup
	start := time.Now()
	for w, c := range clients {
		k := w % nkeys
		stats[w].reader = w < nreaders
		wg.Go(func() { f.benchWorker(pctx, c, w, fmt.Sprintf("%sk%d", prefix, k), keys[k], &total, &stats[w]) })
	}
	if progress != nil {
		stop := showProgress(progress, phase, start, f.duration, &total)
		defer stop()
	}
	wg.Wait()
	end := time.Now()
	elapsed := end.Sub(start)
	if err := ctx.Err(); err != nil {
		return phaseResult{}, err
	}

	r := phaseResult{Phase: phase, Keys: nkeys, MinGrants: -1}
	var acq, hand, racq, wacq []time.Duration
	reads, writes := 0, 0
	for _, s := range stats {
		r.Grants += s.grants
		r.Violations += s.violations
		r.Errors += s.errors
		if s.firstErr != nil && r.FirstError == nil {
			msg := oneLine(s.firstErr)
			r.FirstError = &msg
		}
		if r.MinGrants < 0 || s.grants < r.MinGrants {
			r.MinGrants = s.grants
		}
		r.MaxGrants = max(r.MaxGrants, s.grants)
		acq = append(acq, s.acquire...)
		hand = append(hand, s.handoff...)
		if s.reader {
			reads += s.grants
			racq = append(racq, s.acquire...)
		} else {
			writes += s.grants
			wacq = append(wacq, s.acquire...)
		}
	}
	r.GrantsPerSec = float64(r.Grants) / elapsed.Seconds()
	r.Acquire, r.Handoff = summarize(acq), summarize(hand)
	switch f.primitive {
	case primSemaphore:
		var area float64
		most := 0
		for _, k := range keys {
			k.mu.Lock()
			k.held(end)
			area += k.heldArea
			most = max(most, k.maxHolders)
			k.mu.Unlock()
		}
		mean := area / elapsed.Seconds() / float64(nkeys)
		r.PermitsHeldMean, r.PermitsHeldMax = &mean, &most
	case primRWMutex:
		rps, wps := float64(reads)/elapsed.Seconds(), float64(writes)/elapsed.Seconds()
		rl, wl := summarize(racq), summarize(wacq)
		r.Reads, r.ReadsPerSec, r.ReadAcquire = &reads, &rps, &rl
		r.Writes, r.WritesPerSec, r.WriteAcquire = &writes, &wps, &wl
	}
	return r, nil
}

// grantFuncs returns how worker w of the primitive takes and releases a
// grant of name: the lease of a lock, a permit or a term.
func (f *benchFlags) grantFuncs(c *dlock.Client, w int, name string, reader bool) (take func(context.Context) (*dlock.Lease, error), release func(context.Context, *dlock.Lease) error) {
	unlock := func(ctx context.Context, l *dlock.Lease) error { return l.Unlock(ctx) }
	var opts []dlock.Option
	if f.fair {
		opts = append(opts, dlock.WithFair())
	}
	switch f.primitive {
	case primSemaphore:
		return c.Semaphore(name, f.limit, opts...).Acquire, unlock
	case primRWMutex:
		rw := c.RWMutex(name, opts...)
		if reader {
			return rw.RLock, unlock
		}
		return rw.Lock, unlock
	case primElection:
		e := c.Election(name, opts...)
		value := fmt.Sprintf("worker-%d", w)
		return func(ctx context.Context) (*dlock.Lease, error) { return e.Campaign(ctx, value) }, e.Resign
	}
	return c.Mutex(name, opts...).Lock, unlock
}

// benchWorker takes and releases name until ctx ends.
func (f *benchFlags) benchWorker(ctx context.Context, c *dlock.Client, w int, name string, k *benchKey, total *atomic.Int64, s *workerStats) {
	take, release := f.grantFuncs(c, w, name, s.reader)
	// At most this many holders of a name at once; a writer of the
	// rwmutex, or any grant of the mutex and the election, alone.
	limit := 1
	switch {
	case f.primitive == primSemaphore:
		limit = f.limit
	case f.primitive == primRWMutex && s.reader:
		limit = math.MaxInt // readers hold together
	}
	exclusive := limit == 1
	fail := func(err error) {
		s.errors++
		if s.firstErr == nil {
			s.firstErr = err
		}
	}
	for ctx.Err() == nil {
		k.mu.Lock()
		before := k.maxToken // every token recorded now was granted before this request
		k.mu.Unlock()
		asked := time.Now()
		l, err := take(ctx)
		if err != nil {
			if ctx.Err() == nil {
				fail(err)
				time.Sleep(failedLockPause)
			}
			continue
		}
		got := time.Now()
		k.mu.Lock()
		k.held(got)
		k.holders++
		k.maxHolders = max(k.maxHolders, k.holders)
		if k.holders > limit || k.writers > 0 {
			s.violations++
		}
		// A shared grant's token is above every token granted before it
		// was asked for, and above every writer's before it; an exclusive
		// grant's is above every token granted before it.
		if t := l.Token(); t <= before || t <= k.writerToken || exclusive && t <= k.maxToken {
			s.violations++
		}
		if exclusive {
			k.writers++
			k.writerToken = max(k.writerToken, l.Token())
		}
		k.maxToken = max(k.maxToken, l.Token())
		if k.lastRelease.After(asked) { // a holder released while this worker waited
			s.handoff = append(s.handoff, got.Sub(k.lastRelease))
		}
		k.mu.Unlock()
		s.grants++
		s.acquire = append(s.acquire, got.Sub(asked))
		total.Add(1)
		if f.hold > 0 {
			time.Sleep(f.hold)
		}
		k.mu.Lock()
		now := time.Now()
		k.held(now)
		k.holders--
		if exclusive {
			k.writers--
		}
		k.lastRelease = now
		k.mu.Unlock()
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.timeout)
		if err := release(uctx, l); err != nil {
			fail(err)
		}
		cancel()
	}
}

func summarize(ds []time.Duration) latency {
	if len(ds) == 0 {
		return latency{}
	}
	slices.Sort(ds)
	at := func(p int) time.Duration { return ds[min(len(ds)-1, len(ds)*p/100)] }
	p50, p99, top := ms(at(50)), ms(at(99)), ms(ds[len(ds)-1])
	return latency{Samples: len(ds), P50: &p50, P99: &p99, Max: &top}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// showProgress rewrites one status line on a terminal until stop is called.
func showProgress(w io.Writer, phase string, start time.Time, d time.Duration, total *atomic.Int64) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(w, "\r\033[K")
				return
			case <-t.C:
				el := min(time.Since(start), d)
				fmt.Fprintf(w, "\r\033[K%s: %.1fs of %v, %d grants", phase, el.Seconds(), d, total.Load())
			}
		}
	}()
	return func() { close(done); <-finished }
}

func (f *benchFlags) printTable(w io.Writer, rep benchReport) error {
	fmt.Fprintf(w, "dlock bench: %s\n", rep.Backend)
	what := map[string]string{
		primMutex:     "a mutex per name",
		primSemaphore: fmt.Sprintf("a semaphore of %d permits per name", f.limit),
		primRWMutex:   fmt.Sprintf("a read-write lock per name, %d of the workers reading", int(math.Round(f.readers*float64(rep.Workers)))),
		primElection:  "an election per name; a grant is a term",
	}[f.primitive]
	if f.fair {
		what += ", granted in arrival order (--fair)"
	}
	fmt.Fprintf(w, "%s; %d workers, each with its own connection; each grant held %v; %v per phase\n\n", what, rep.Workers, f.hold, f.duration)
	t := newTable(w)
	grants, acquire := "GRANTS\tGRANTS/S", "ACQUIRE p50\tp99\tmax"
	switch f.primitive {
	case primSemaphore:
		grants += "\tHELD mean\tmax"
	case primRWMutex:
		grants += "\tREADS/S\tWRITES/S"
		acquire = "READ WAIT p50\tp99\tmax\tWRITE WAIT p50\tp99\tmax"
	case primElection:
		grants, acquire = "TERMS\tTERMS/S", "CAMPAIGN p50\tp99\tmax"
	}
	fmt.Fprintf(t, "PHASE\tKEYS\t%s\t%s\tHAND-OFF p50\tp99\tmax\tGRANTS/WORKER min-max\tVIOLATIONS\tERRORS\n", grants, acquire)
	for _, p := range rep.Phases {
		cells := []string{p.Phase, fmt.Sprint(p.Keys), fmt.Sprint(p.Grants), fmt.Sprintf("%.1f", p.GrantsPerSec)}
		acq := p.Acquire.columns()
		switch f.primitive {
		case primSemaphore:
			cells = append(cells, fmt.Sprintf("%.2f", *p.PermitsHeldMean), fmt.Sprint(*p.PermitsHeldMax))
		case primRWMutex:
			cells = append(cells, fmt.Sprintf("%.1f", *p.ReadsPerSec), fmt.Sprintf("%.1f", *p.WritesPerSec))
			r, wr := p.ReadAcquire.columns(), p.WriteAcquire.columns()
			cells = append(cells, r[:]...)
			acq = wr
		}
		cells = append(cells, acq[:]...)
		hand := p.Handoff.columns()
		cells = append(cells, hand[:]...)
		cells = append(cells, fmt.Sprintf("%d-%d", p.MinGrants, p.MaxGrants), fmt.Sprint(p.Violations), fmt.Sprint(p.Errors))
		fmt.Fprintln(t, strings.Join(cells, "\t"))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	for _, p := range rep.Phases {
		if p.FirstError != nil {
			fmt.Fprintf(w, "%s: first error: %s\n", p.Phase, *p.FirstError)
		}
	}
	return nil
}

// columns are p50, p99 and max for the table: "-" without samples.
func (l latency) columns() [3]string {
	if l.Samples == 0 {
		return [3]string{"-", "-", "-"}
	}
	return [3]string{fmtMS(*l.P50), fmtMS(*l.P99), fmtMS(*l.Max)}
}

func fmtMS(v float64) string {
	return round(time.Duration(v * float64(time.Millisecond))).String()
}

const (
	// failedLockPause is a bench worker's pause after a failed Lock, so
	// that a backend that fails at once is not hammered in a tight loop
	// while the failure is counted.
	failedLockPause = 10 * time.Millisecond
	// progressEvery is how often the progress line is redrawn: five times
	// a second reads as live without flicker.
	progressEvery = 200 * time.Millisecond
)
