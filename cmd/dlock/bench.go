package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock/dlock"
)

const benchUsage = `Usage:
  dlock bench [flags]

Measures a backend with --workers clients, each with its own connection as
separate processes would have, in two phases of --duration each:

  uncontended  every worker locks and unlocks a name of its own
  contended    the workers share --keys names (worker i uses name i mod K)

Each grant holds the lock for --hold. Reported per phase: grants and grants
per second; acquire latency (from calling Lock to holding the lock, waiting
included) p50, p99 and max; hand-off latency (from the moment a holder starts
to release to the moment a waiting worker holds the lock); fairness (the
fewest and most grants one worker got); and exclusion violations — two
holders of one name at once, or a token not above the previous holder's —
which must be 0. On a terminal a progress line shows while it runs.

What it writes: locks named bench/RUN/… (RUN is random, one per run), each
released when taken; at the end it breaks any of them still held. Backends
that keep a fencing counter per name outside the lock (Redis, for one) keep
those of the run's names. Before writing to a backend that is neither the
throwaway etcd nor this user's "dlock dev", it asks on a terminal; without
a terminal it refuses (status 64) unless --yes is given.

Flags:
{{flags}}` + backendHelp + metricsHelp + `
The throwaway etcd runs inside the bench process and shares its CPU.

With --json: {"schema": 1, "backend", "workers", "hold_ms",
"duration_per_phase", "phases": [...]}; a figure that was not measured (the
hand-off latency of the uncontended phase, a first error when there was
none) is null, never left out.

Exit status: 0 when no exclusion was violated, 1 when one was (and only
then), 64 for a usage error, 69 when the backend cannot be reached or
failed, 70 when the run itself failed before a verdict (interrupted, for
one).

Example:
  dlock bench
  dlock bench --workers 16 --keys 4 --duration 10s --json
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
}

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
}

type benchReport struct {
	Schema   int           `json:"schema"`
	Backend  string        `json:"backend"`
	Workers  int           `json:"workers"`
	HoldMS   float64       `json:"hold_ms"`
	Duration string        `json:"duration_per_phase"`
	Phases   []phaseResult `json:"phases"`
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
	f.metrics.register(fs, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usageErrorf("unexpected argument %q", fs.Arg(0))
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

	var progress io.Writer
	if askable(os.Stderr) && !f.json {
		progress = env.stderr
	}
	defer f.breakLeftovers(ctx, env, clients[0], b, prefix+"/")
	rep := benchReport{Schema: jsonSchema, Backend: b.String(), Workers: f.workers, HoldMS: ms(f.hold), Duration: f.duration.String()}
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
			return withStatus(exitViolation, fmt.Errorf("%d exclusion violations in the %s phase", p.Violations, p.Phase))
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

// benchKey is the shared state of one name, to check exclusion and measure
// hand-offs.
type benchKey struct {
	inside atomic.Int32 // holders in the critical section: must be 0 or 1

	mu          sync.Mutex // taken only by the holder, so never contended
	lastToken   uint64
	lastRelease time.Time
}

type workerStats struct {
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
	var wg sync.WaitGroup
	start := time.Now()
	for w, c := range clients {
		k := w % nkeys
		wg.Go(func() { stats[w] = f.benchWorker(pctx, c, fmt.Sprintf("%sk%d", prefix, k), keys[k], &total) })
	}
	if progress != nil {
		stop := showProgress(progress, phase, start, f.duration, &total)
		defer stop()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return phaseResult{}, err
	}

	r := phaseResult{Phase: phase, Keys: nkeys, MinGrants: -1}
	var acq, hand []time.Duration
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
	}
	r.GrantsPerSec = float64(r.Grants) / elapsed.Seconds()
	r.Acquire, r.Handoff = summarize(acq), summarize(hand)
	return r, nil
}

// benchWorker locks and unlocks name until ctx ends.
func (f *benchFlags) benchWorker(ctx context.Context, c *dlock.Client, name string, k *benchKey, total *atomic.Int64) workerStats {
	var s workerStats
	m := c.Mutex(name)
	fail := func(err error) {
		s.errors++
		if s.firstErr == nil {
			s.firstErr = err
		}
	}
	for ctx.Err() == nil {
		asked := time.Now()
		l, err := m.Lock(ctx)
		if err != nil {
			if ctx.Err() == nil {
				fail(err)
				time.Sleep(failedLockPause)
			}
			continue
		}
		got := time.Now()
		if k.inside.Add(1) != 1 {
			s.violations++
		}
		k.mu.Lock()
		if l.Token() <= k.lastToken {
			s.violations++
		}
		k.lastToken = l.Token()
		if k.lastRelease.After(asked) { // it was released while this worker waited
			s.handoff = append(s.handoff, got.Sub(k.lastRelease))
		}
		k.mu.Unlock()
		s.grants++
		s.acquire = append(s.acquire, got.Sub(asked))
		total.Add(1)
		if f.hold > 0 {
			time.Sleep(f.hold)
		}
		k.inside.Add(-1)
		k.mu.Lock()
		k.lastRelease = time.Now()
		k.mu.Unlock()
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.timeout)
		if err := l.Unlock(uctx); err != nil {
			fail(err)
		}
		cancel()
	}
	return s
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
	fmt.Fprintf(w, "%d workers, each with its own connection; each grant held %v; %v per phase\n\n", rep.Workers, f.hold, f.duration)
	t := newTable(w)
	fmt.Fprintln(t, "PHASE\tKEYS\tGRANTS\tGRANTS/S\tACQUIRE p50\tp99\tmax\tHAND-OFF p50\tp99\tmax\tGRANTS/WORKER min-max\tVIOLATIONS\tERRORS")
	for _, p := range rep.Phases {
		acq, hand := p.Acquire.columns(), p.Handoff.columns()
		fmt.Fprintf(t, "%s\t%d\t%d\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%d-%d\t%d\t%d\n",
			p.Phase, p.Keys, p.Grants, p.GrantsPerSec,
			acq[0], acq[1], acq[2],
			hand[0], hand[1], hand[2], p.MinGrants, p.MaxGrants, p.Violations, p.Errors)
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
