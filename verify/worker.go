package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/internal/clock"
)

// workerEnv carries a client process's WorkerConfig, as JSON.
const workerEnv = "DLOCK_VERIFY_WORKER"

// WorkerConfig is what one client process of the workload is told.
type WorkerConfig struct {
	Proc     string        `json:"proc"`     // its name in the history
	URL      string        `json:"url"`      // the backend, opened with dlock.Open
	Names    []string      `json:"names"`    // the lock names it contends for
	TTL      time.Duration `json:"ttl"`      // lease length
	HoldMin  time.Duration `json:"hold_min"` // each hold lasts a random time in [HoldMin, HoldMax)
	HoldMax  time.Duration `json:"hold_max"`
	Until    time.Time     `json:"until"`    // no new acquire after this
	Register string        `json:"register"` // the fenced register's address
	History  string        `json:"history"`  // the JSON-lines file it appends its events to
	Seed     uint64        `json:"seed"`
	// ClockRate and ClockOffset, when set, skew the process's clock (see
	// clock.Skew): the Skew fault.
	ClockRate   float64       `json:"clock_rate,omitempty"`
	ClockOffset time.Duration `json:"clock_offset,omitempty"`
	// Workload is the primitive it takes (default WorkloadMutex), and
	// Limit the semaphore's permits (WorkloadSemaphore).
	Workload Workload `json:"workload,omitempty"`
	Limit    int      `json:"limit,omitempty"`
}

// IsWorker reports whether this process was started as a client process of
// a verification run. A test binary's TestMain, or the dlock command's
// hidden verify-worker subcommand, then calls WorkerMain:
//
//	func TestMain(m *testing.M) {
//		if verify.IsWorker() {
//			os.Exit(verify.WorkerMain())
//		}
//		dlocktest.Main(m)
//	}
func IsWorker() bool { return os.Getenv(workerEnv) != "" }

// WorkerMain runs the client process described by the environment and
// returns its exit status: 0 when it ran to its deadline, 2 when it could
// not start, 3 when it could not record every event of its history. The backend's package must be linked in (for dlock.Open).
func WorkerMain() int {
	var cfg WorkerConfig
	if err := json.Unmarshal([]byte(os.Getenv(workerEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "verify worker: bad configuration:", err)
		return 2
	}
	f, err := os.OpenFile(cfg.History, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "verify worker:", err)
		return 2
	}
	defer f.Close()
	if cfg.ClockRate != 0 || cfg.ClockOffset != 0 {
		if !(cfg.ClockRate > 0) {
			fmt.Fprintln(os.Stderr, "verify worker: bad configuration: the clock rate must be positive")
			return 2
		}
		// Before dlock reads the clock. The history keeps the real time.
		clock.Skew(cfg.ClockRate, cfg.ClockOffset)
	}
	rec := newRecorder(cfg.Proc, f)
	ctx := context.Background()
	var c *dlock.Client
	// The backend may be restarting (a fault): keep trying until the deadline.
	for {
		octx, cancel := context.WithTimeout(ctx, openTimeout)
		c, err = dlock.Open(octx, cfg.URL)
		cancel()
		if err == nil {
			break
		}
		if errors.Is(err, dlock.ErrInvalidOption) || time.Now().After(cfg.Until) {
			fmt.Fprintln(os.Stderr, "verify worker: open backend:", err)
			return 2
		}
		time.Sleep(reopenPause)
	}
	runWorker(ctx, cfg, c, rec)
	c.Close()
	if err := rec.failed(); err != nil {
		// An incomplete history cannot be judged: the harness reports the
		// exit status.
		fmt.Fprintln(os.Stderr, "verify worker: recording the history:", err)
		return 3
	}
	return 0
}

const (
	// openTimeout bounds one attempt to open the backend, as a user's
	// dlock.Open would be; a worker tries again every reopenPause while a
	// fault keeps the backend away, until its run ends.
	openTimeout = 10 * time.Second
	reopenPause = 200 * time.Millisecond
	// registerTimeoutMin is the least a write to the fenced register may
	// take before it counts as unanswered: the register is on loopback.
	registerTimeoutMin = 2 * time.Second
	// unlockSlack is added to the TTL-based bounds of a worker's Unlock
	// (two TTLs) and of the harness's Break (one TTL): past those the lease
	// has expired on every backend, and waiting longer would only delay
	// the next grant the run checks.
	unlockSlack = 5 * time.Second
)

// runWorker is the client loop: acquire → write the token to the fenced
// register → read it back → hold a random time (watching Done) → write
// again → release, until cfg.Until. The second write is made even when the
// lease was lost meanwhile: it probes the fence, which must refuse it if a
// newer holder wrote.
func runWorker(ctx context.Context, cfg WorkerConfig, c *dlock.Client, rec *recorder) {
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(time.Now().UnixNano())))
	reg := &registerClient{addr: cfg.Register, timeout: max(registerTimeoutMin, cfg.TTL)}
	defer reg.close()
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	if cfg.Workload == WorkloadElection {
		// Every candidate also watches the leadership, as a service's
		// other instances would.
		octx, cancel := context.WithCancel(ctx)
		observed := make(chan struct{})
		go func() {
			defer close(observed)
			for ld := range c.Election(cfg.Names[0]).Observe(octx) {
				rec.record(Event{Op: OpObserve, Name: cfg.Names[0], Token: ld.Term, Value: ld.Value})
			}
		}()
		defer func() {
			cancel()
			<-observed
		}()
	}
	stop := false // the harness ended the run early (registerReply.Stop)
	for hold := 1; !stop && time.Now().Before(cfg.Until) && ctx.Err() == nil; hold++ {
		name := cfg.Names[rng.IntN(len(cfg.Names))]
		// A read-write lock's holds are a reader's two times in three.
		shared := cfg.Workload == WorkloadRWMutex && rng.IntN(3) > 0
		limit := 0
		if cfg.Workload == WorkloadSemaphore {
			limit = cfg.Limit
		}
		id := rec.nextID()
		rec.record(Event{Op: OpAcquire, Phase: Invoke, ID: id, Hold: hold, Name: name, Limit: limit, Shared: shared})
		actx, cancel := context.WithDeadline(ctx, cfg.Until)
		// The loss is recorded where it is decided, before Done closes: the
		// Lost hook runs then. A loss decided after the release was called
		// (the release refused) is recorded too, after the release's invoke,
		// so the checker can tell that it was learnt only at release.
		lost := func(name string, tok uint64, cause error) {
			rec.record(Event{Op: OpLost, Hold: hold, Name: name, Token: tok, Err: cause.Error()})
		}
		opts := []dlock.Option{dlock.WithTTL(cfg.TTL), dlock.WithHooks(dlock.Hooks{Lost: lost})}
		var l *dlock.Lease
		var err error
		switch {
		case cfg.Workload == WorkloadSemaphore:
			l, err = c.Semaphore(name, cfg.Limit, opts...).Acquire(actx)
		case cfg.Workload == WorkloadRWMutex && shared:
			l, err = c.RWMutex(name, opts...).RLock(actx)
		case cfg.Workload == WorkloadRWMutex:
			l, err = c.RWMutex(name, opts...).Lock(actx)
		case cfg.Workload == WorkloadElection:
			l, err = c.Election(name, opts...).Campaign(actx, cfg.Proc)
		case cfg.Workload == WorkloadFairMutex:
			l, err = c.Mutex(name, append(opts, dlock.WithFair())...).Lock(actx)
		default:
			l, err = c.Mutex(name, opts...).Lock(actx)
		}
		cancel()
		if err != nil {
			rec.record(Event{Op: OpAcquire, Phase: Fail, ID: id, Hold: hold, Name: name, Err: err.Error()})
			time.Sleep(between(cfg.HoldMin/4, cfg.HoldMin))
			continue
		}
		tok := l.Token()
		rec.record(Event{Op: OpAcquire, Phase: OK, ID: id, Hold: hold, Name: name, Token: tok, Expires: realExpires(l, cfg.ClockRate)})
		// Each renewal's proven deadline, for the checker to compare with
		// other grants: watched until the release is called or Done closes.
		stopWatch := make(chan struct{})
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			watchDeadline(l, cfg, hold, name, rec, stopWatch)
		}()
		write := func(n int) {
			id := rec.nextID()
			v := writeValue(cfg.Proc, hold, n)
			rec.record(Event{Op: OpWrite, Phase: Invoke, ID: id, Hold: hold, Name: name, Token: tok, Value: v})
			rep, err := reg.do(registerRequest{Op: "w", Name: name, Token: tok, Value: v})
			stop = stop || rep.Stop
			switch {
			case err != nil:
				rec.record(Event{Op: OpWrite, Phase: Fail, ID: id, Hold: hold, Name: name, Token: tok, Value: v, Err: err.Error()})
			case rep.OK:
				rec.record(Event{Op: OpWrite, Phase: OK, ID: id, Hold: hold, Name: name, Token: tok, Value: v, Seq: rep.Seq})
			default:
				rec.record(Event{Op: OpWrite, Phase: Refused, ID: id, Hold: hold, Name: name, Token: tok, Value: v, Highest: rep.Token, Seq: rep.Seq})
			}
		}
		// A reader and a semaphore's permit holder share the lock with
		// others whose tokens differ: they do not write the fenced
		// register (it would refuse all but the highest token), only read
		// it, and that read begins the hold for the fault injector.
		exclusive := !shared && limit <= 1
		if exclusive {
			write(1)
		}
		id = rec.nextID()
		rec.record(Event{Op: OpRead, Phase: Invoke, ID: id, Hold: hold, Name: name})
		holdFor := between(cfg.HoldMin, cfg.HoldMax)
		if rep, err := reg.do(registerRequest{Op: "r", Proc: cfg.Proc, Name: name, Begin: !exclusive}); err != nil {
			rec.record(Event{Op: OpRead, Phase: Fail, ID: id, Hold: hold, Name: name, Err: err.Error()})
		} else {
			rec.record(Event{Op: OpRead, Phase: OK, ID: id, Hold: hold, Name: name, Token: rep.Token, Value: rep.Value})
			stop = stop || rep.Stop
			if rep.StretchFor > 0 { // a fault is aimed at this hold
				holdFor = min(rep.StretchFor, 3*cfg.TTL)
			}
		}
		t := time.NewTimer(holdFor)
		select {
		case <-t.C:
		case <-l.Done():
			t.Stop()
		}
		if exclusive {
			write(2)
		}

		close(stopWatch)
		<-watched
		id = rec.nextID()
		rec.record(Event{Op: OpRelease, Phase: Invoke, ID: id, Hold: hold, Name: name, Token: tok})
		uctx, cancel := context.WithTimeout(ctx, 2*cfg.TTL+unlockSlack)
		err = l.Unlock(uctx) // Election.Resign is Unlock
		cancel()
		if err != nil {
			rec.record(Event{Op: OpRelease, Phase: Fail, ID: id, Hold: hold, Name: name, Token: tok, Err: err.Error()})
		} else {
			rec.record(Event{Op: OpRelease, Phase: OK, ID: id, Hold: hold, Name: name, Token: tok})
		}
		time.Sleep(between(0, cfg.HoldMin))
	}
}

// realExpires is the lease's proven deadline (Lease.Expires) as a time of
// the real clock the history uses: a skewed client's deadline is read on
// its own clock and converted at its rate.
func realExpires(l *dlock.Lease, rate float64) time.Time {
	left := clock.Until(l.Expires())
	if rate > 0 {
		left = time.Duration(float64(left) / rate)
	}
	return time.Now().Add(left)
}

// watchDeadline records each move of the lease's proven deadline (OpRenew
// with Expires) until stop closes or the lease ends. It polls Expires often
// enough (TTL/10) to see every renewal, which come about TTL/3 apart.
func watchDeadline(l *dlock.Lease, cfg WorkerConfig, hold int, name string, rec *recorder, stop <-chan struct{}) {
	last := l.Expires()
	t := time.NewTicker(max(cfg.TTL/10, 5*time.Millisecond))
	defer t.Stop()
	for ended := false; !ended; {
		select {
		case <-stop:
			ended = true // a last look: a renewal may have landed since the tick
		case <-l.Done():
			ended = true
		case <-t.C:
		}
		if e := l.Expires(); e.After(last) {
			last = e
			rec.record(Event{Op: OpRenew, Hold: hold, Name: name, Token: l.Token(), Expires: realExpires(l, cfg.ClockRate)})
		}
	}
}
