package verify

import (
	"context"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock/dlock/backend/memlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/etcdserver"
)

// TestWorkloadsPassOnACorrectBackend: each primitive's workload on
// memlock passes, and the semaphore's and the read-write lock's holds did
// share the name (a checker that saw them one at a time would test
// nothing).
func TestWorkloadsPassOnACorrectBackend(t *testing.T) {
	for _, w := range Workloads {
		t.Run(string(w), func(t *testing.T) {
			res := inProcessWorkload(t, "memlock", w, func(d *memlock.Driver) driver.Driver { return d })
			if res.Verdict() != "PASS" || res.Grants < 10 || res.Overlaps != 0 {
				t.Fatalf("verdict %s, %d grants, %d overlaps: %v", res.Verdict(), res.Grants, res.Overlaps, res.Violations)
			}
			// Observe reads the leadership every 100ms here (memlock keeps
			// no history of changes): it misses most of these short terms.
			if w == WorkloadElection && res.Observed < 10 {
				t.Errorf("the observers reported %d leaders of %d terms", res.Observed, res.Grants)
			}
			want := map[Workload]int{WorkloadMutex: 1, WorkloadFairMutex: 1, WorkloadElection: 1, WorkloadSemaphore: 3, WorkloadRWMutex: 2}[w]
			switch {
			case w == WorkloadRWMutex && res.MostHeld < want:
				t.Errorf("readers never held together: at most %d at once", res.MostHeld)
			case w != WorkloadRWMutex && res.MostHeld != want:
				t.Errorf("at most %d held at once, want %d", res.MostHeld, want)
			}
		})
	}
}

// fairGrantsTwo is a broken fair mode: a fair request is served as a
// semaphore of 2; the default mutex is sound.
type fairGrantsTwo struct{ driver.Driver }

func (b fairGrantsTwo) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Fair && req.Limit <= 1 && !req.Shared {
		req.Limit = 2
	}
	return b.Driver.Acquire(ctx, req)
}

// TestFairMutexGrantingTwiceIsCaught: the mutex-fair workload asks for the
// fair mode (a worker that forgot dlock.WithFair would pass here, on the
// sound default mutex) and checks it as the mutex.
func TestFairMutexGrantingTwiceIsCaught(t *testing.T) {
	res := inProcessWorkload(t, "fair-grants-two", WorkloadFairMutex, func(d *memlock.Driver) driver.Driver { return fairGrantsTwo{d} })
	if res.Verdict() != "FAIL" || !violationContains(res, CheckExclusion, "without faults") {
		t.Fatalf("a fair mode that granted a mutex twice passed: most held %d, %v", res.MostHeld, res.Violations)
	}
}

// onePermitTooMany is a broken semaphore: it grants one permit more than
// asked for.
type onePermitTooMany struct{ driver.Driver }

func (b onePermitTooMany) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Limit > 1 {
		req.Limit++
	}
	return b.Driver.Acquire(ctx, req)
}

func TestSemaphoreGrantingOneTooManyIsCaught(t *testing.T) {
	res := inProcessWorkload(t, "one-permit-too-many", WorkloadSemaphore, func(d *memlock.Driver) driver.Driver { return onePermitTooMany{d} })
	if res.Verdict() != "FAIL" || !violationContains(res, CheckExclusion, "permits of 3 were held") || res.MostHeld != 4 {
		t.Fatalf("a semaphore of 3 that granted 4 passed: most held %d, %v", res.MostHeld, res.Violations)
	}
}

// writersRead is a broken read-write lock: a writer is granted as a
// reader.
type writersRead struct{ driver.Driver }

func (b writersRead) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if !req.Shared && b.Capabilities().RWMutex && req.Fair {
		req.Shared = true
	}
	return b.Driver.Acquire(ctx, req)
}

func TestRWMutexWriterAmongReadersIsCaught(t *testing.T) {
	res := inProcessWorkload(t, "writers-read", WorkloadRWMutex, func(d *memlock.Driver) driver.Driver { return writersRead{d} })
	if res.Verdict() != "FAIL" || !violationContains(res, CheckExclusion, "without faults") {
		t.Fatalf("a read-write lock whose writers shared the lock passed: %v", res.Violations)
	}
}

// electsEveryCandidate is a broken election: every campaigner leads at
// once, with increasing terms.
type electsEveryCandidate struct {
	driver.Driver
	terms *atomic.Uint64
}

func (b electsEveryCandidate) Acquire(context.Context, driver.Request) (driver.Grant, error) {
	return driver.Grant{Token: b.terms.Add(1)}, nil
}
func (b electsEveryCandidate) Extend(context.Context, driver.Held, time.Duration) error { return nil }
func (b electsEveryCandidate) Release(context.Context, driver.Held) error               { return nil }

func TestElectionWithTwoLeadersIsCaught(t *testing.T) {
	var terms atomic.Uint64
	res := inProcessWorkload(t, "elects-every-candidate", WorkloadElection, func(d *memlock.Driver) driver.Driver { return electsEveryCandidate{d, &terms} })
	if res.Verdict() != "FAIL" || !hasViolation(res, CheckExclusion) || res.Refused == 0 {
		t.Fatalf("an election with several leaders at once passed (%d stale writes refused): %v", res.Refused, res.Violations)
	}
}

// TestObserverReportingAnotherLeaderFails: an observer that reports a
// term with the wrong leader's value, or a term before it was asked for,
// or terms going back, fails the history.
func TestObserverReportingAnotherLeaderFails(t *testing.T) {
	observe := func(h *history, proc string, term uint64, value string) *history {
		return h.add(Event{Proc: proc, Op: OpObserve, Name: "x", Token: term, Value: value})
	}
	h := &history{}
	h.grant("c0.0", 1, 5)
	observe(h, "c2.0", 5, "c0.0")
	observe(h, "c3.0", 6, "c0.0") // c1.0 will be granted 6
	observe(h, "c4.0", 6, "c1.0") // before c1.0 asked
	h.release("c0.0", 1, 5, OK).grant("c1.0", 1, 6)
	observe(h, "c2.0", 6, "c1.0")
	observe(h, "c2.0", 5, "c0.0") // back to an older term
	h.release("c1.0", 1, 6, OK)
	r := Check(h.events, Params{TTL: time.Second, Bound: time.Second})
	for _, want := range []string{`term 6 led by "c0.0"`, "after term 6", "before c1.0 asked for it"} {
		if !violationContains(r, CheckObserve, want) {
			t.Errorf("no observe violation saying %q: %v", want, r.Violations)
		}
	}
	if r.Observed != 5 {
		t.Errorf("observed %d leaders, want 5", r.Observed)
	}
}

// A semaphore of 3 under faults: the fourth grant is excused only if one
// of the three it overlapped lost its permit as the contract allows.
func permitHistory(pauseOne bool) *history {
	h := &history{}
	for i, p := range []string{"c0.0", "c1.0", "c2.0"} {
		h.add(Event{Proc: p, Op: OpAcquire, Phase: Invoke, ID: 10, Hold: 1, Name: "x", Limit: 3})
		h.add(Event{Proc: p, Op: OpAcquire, Phase: OK, ID: 10, Hold: 1, Name: "x", Limit: 3, Token: uint64(5 + i), Expires: h.now().Add(time.Second)})
	}
	heal := func() {}
	if pauseOne {
		heal = h.fault("pause", "c1.0")
	}
	h.pass(10 * time.Millisecond)
	h.add(Event{Proc: "c3.0", Op: OpAcquire, Phase: Invoke, ID: 10, Hold: 1, Name: "x", Limit: 3})
	h.add(Event{Proc: "c3.0", Op: OpAcquire, Phase: OK, ID: 10, Hold: 1, Name: "x", Limit: 3, Token: 8})
	heal()
	for _, p := range []string{"c0.0", "c1.0", "c2.0", "c3.0"} {
		h.add(Event{Proc: p, Op: OpRelease, Phase: Invoke, ID: 20, Hold: 1, Name: "x"})
		h.add(Event{Proc: p, Op: OpRelease, Phase: Fail, ID: 20, Hold: 1, Name: "x", Err: "lease lost"})
	}
	return h.grant("c0.0", 2, 9).release("c0.0", 2, 9, OK) // recovery
}

func TestSemaphoreOverLimitIsExcusedOnlyByAPausedHolder(t *testing.T) {
	if r := Check(permitHistory(false).events, strict); r.Verdict() != "FAIL" || !violationContains(r, CheckExclusion, "3 permits of 3 were held") {
		t.Errorf("a fourth permit of three, nobody paused, passed: %v", r.Violations)
	}
	r := Check(permitHistory(true).events, strict)
	if r.Verdict() != "PASS" || r.Excused[ExcusePause] != 1 || r.MostHeld != 4 {
		t.Errorf("a fourth permit while one of three was paused: %s, excused %v, most held %d, %v", r.Verdict(), r.Excused, r.MostHeld, r.Violations)
	}
}

// TestRunInADirUsedBeforeStartsAfresh: a second run in the same Dir does
// not mix the first run's histories into its own (the client processes
// append to them).
func TestRunInADirUsedBeforeStartsAfresh(t *testing.T) {
	srv, err := etcdserver.Start(context.Background(), etcdserver.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dir := t.TempDir()
	for i := range 2 {
		res, err := Run(context.Background(), Config{
			Backend: "etcd", Clients: 2, Duration: 3 * time.Second, Dir: dir,
			Deploy: Deployment{Endpoints: srv.Endpoints(), URL: joined("etcd", "")},
			Spawn:  func() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") },
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Verdict() != "PASS" || res.Grants == 0 {
			t.Fatalf("run %d in the same directory: %d grants, %v", i+1, res.Grants, res.Violations)
		}
		// Each run's lock has a name of its own: one name in a history.
		f, err := os.Open(res.History)
		if err != nil {
			t.Fatal(err)
		}
		events, err := ReadHistory(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, e := range events {
			if e.Op == OpAcquire {
				names[e.Name] = true
			}
		}
		if len(names) != 1 {
			t.Errorf("run %d's history has the acquires of %d lock names, want 1 (its own): %v", i+1, len(names), names)
		}
	}
}

// TestObservedTermGrantedAgainAfterATokenResetPasses: where tokens restart
// with the server (TokensMayReset), term 1 granted to c0 and, after the
// restart, to c1 may be observed led by either.
func TestObservedTermGrantedAgainAfterATokenResetPasses(t *testing.T) {
	h := &history{}
	h.grant("c0.0", 1, 1)
	h.add(Event{Proc: "c2.0", Op: OpObserve, Name: "x", Token: 1, Value: "c0.0"})
	h.release("c0.0", 1, 1, OK).grant("c1.0", 1, 1)
	h.add(Event{Proc: "c2.0", Op: OpObserve, Name: "x", Token: 1, Value: "c1.0"})
	h.release("c1.0", 1, 1, OK)
	if r := Check(h.events, Params{TTL: time.Second, Bound: time.Second, Faults: true, TokensMayReset: true}); hasViolation(r, CheckObserve) {
		t.Errorf("a term granted twice after a token reset, observed with each leader: %v", r.Violations)
	}
}

// TestPermitGrantedAsABreakRanIsExcusedByIt: c0's permit is granted while
// an operator's Break of the semaphore runs, and the Break takes it; c0
// learns it only at its release, before its first renewal was due, and
// c3 is granted a permit meanwhile beside the two others: excused as
// break. The same permit granted after the Break returned is not.
func TestPermitGrantedAsABreakRanIsExcusedByIt(t *testing.T) {
	build := func(grantedDuringBreak bool) *history {
		h := &history{}
		acquire := func(proc string, token uint64) {
			h.add(Event{Proc: proc, Op: OpAcquire, Phase: Invoke, ID: 10, Hold: 1, Name: "x", Limit: 3})
			h.add(Event{Proc: proc, Op: OpAcquire, Phase: OK, ID: 10, Hold: 1, Name: "x", Limit: 3, Token: token, Expires: h.now().Add(time.Second)})
		}
		brk := func(phase Phase) {
			h.add(Event{Proc: "nemesis", Op: OpBreak, Phase: phase, ID: 1, Name: "x", Target: "c9.0"})
		}
		if grantedDuringBreak {
			h.add(Event{Proc: "c0.0", Op: OpAcquire, Phase: Invoke, ID: 10, Hold: 1, Name: "x", Limit: 3})
			brk(Invoke)
			h.add(Event{Proc: "c0.0", Op: OpAcquire, Phase: OK, ID: 10, Hold: 1, Name: "x", Limit: 3, Token: 5, Expires: h.now().Add(time.Second)})
			brk(OK)
		} else {
			brk(Invoke)
			brk(OK)
			acquire("c0.0", 5)
		}
		acquire("c1.0", 6)
		acquire("c2.0", 7)
		acquire("c3.0", 8)
		for _, p := range []string{"c0.0", "c1.0", "c2.0", "c3.0"} {
			h.add(Event{Proc: p, Op: OpRelease, Phase: Invoke, ID: 20, Hold: 1, Name: "x"})
			if p == "c0.0" {
				h.add(Event{Proc: p, Op: OpLost, Hold: 1, Name: "x", Token: 5, Err: "lease lost"})
				h.add(Event{Proc: p, Op: OpRelease, Phase: Fail, ID: 20, Hold: 1, Name: "x", Err: "lease lost"})
			} else {
				h.add(Event{Proc: p, Op: OpRelease, Phase: OK, ID: 20, Hold: 1, Name: "x"})
			}
		}
		return h
	}
	if r := Check(build(true).events, strict); r.Verdict() != "PASS" || r.Excused[ExcuseBreak] != 1 {
		t.Errorf("a permit taken by the Break that ran as it was granted: %s, excused %v, %v", r.Verdict(), r.Excused, r.Violations)
	}
	if r := Check(build(false).events, strict); r.Verdict() != "FAIL" || !violationContains(r, CheckExclusion, "3 permits of 3 were held") {
		t.Errorf("a fourth permit while three granted after the Break held: %s, %v", r.Verdict(), r.Violations)
	}
}
