package verify

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/memlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/driver"
)

func TestMain(m *testing.M) {
	if IsWorker() {
		os.Exit(WorkerMain())
	}
	if mode := os.Getenv(raceChildEnv); mode != "" {
		raceChild(mode)
		os.Exit(0)
	}
	dlocktest.Main(m)
}

// inProcess runs the workload on goroutines against drivers made by wrap
// over one memlock server, without faults.
func inProcess(t *testing.T, backend string, wrap func(*memlock.Driver) driver.Driver) *Result {
	t.Helper()
	return inProcessWorkload(t, backend, WorkloadMutex, wrap)
}

// inProcessWorkload is inProcess with the clients taking workload (a
// semaphore of 3 permits, with 5 clients).
func inProcessWorkload(t *testing.T, backend string, workload Workload, wrap func(*memlock.Driver) driver.Driver) *Result {
	t.Helper()
	srv := memlock.NewServer()
	clients := 4
	if workload == WorkloadSemaphore {
		clients = 5
	}
	res, err := Run(context.Background(), Config{
		Backend: backend, Workload: workload, Clients: clients, Duration: 3 * time.Second, TTL: time.Second, Dir: t.TempDir(),
		HoldMin: 5 * time.Millisecond, HoldMax: 30 * time.Millisecond,
		Open: func(context.Context) (*dlock.Client, error) { return dlock.New(wrap(memlock.New(srv))), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d ops, %d grants, %d overlaps, %d refused; %v", backend, res.Ops, res.Grants, res.Overlaps, res.Refused, res.Violations[:min(3, len(res.Violations))])
	return res
}

func hasViolation(r *Result, check string) bool {
	for _, v := range r.Violations {
		if v.Check == check {
			return true
		}
	}
	return false
}

func TestCorrectBackendPasses(t *testing.T) {
	res := inProcess(t, "memlock", func(d *memlock.Driver) driver.Driver { return d })
	if res.Verdict() != "PASS" || res.Grants < 10 || res.Overlaps != 0 {
		t.Fatalf("memlock: verdict %s, %d grants, %d overlaps: %v", res.Verdict(), res.Grants, res.Overlaps, res.Violations)
	}
}

// grantsBlindly is a broken backend: it grants every acquire at once, with
// increasing tokens, and never checks who holds the lock.
type grantsBlindly struct {
	driver.Driver
	tokens *atomic.Uint64
}

func (b grantsBlindly) Acquire(context.Context, driver.Request) (driver.Grant, error) {
	return driver.Grant{Token: b.tokens.Add(1)}, nil
}
func (b grantsBlindly) Extend(context.Context, driver.Held, time.Duration) error { return nil }
func (b grantsBlindly) Release(context.Context, driver.Held) error               { return nil }

func TestBackendThatGrantsWithoutCheckingIsCaught(t *testing.T) {
	var tokens atomic.Uint64
	res := inProcess(t, "grants-blindly", func(d *memlock.Driver) driver.Driver { return grantsBlindly{d, &tokens} })
	if res.Verdict() != "FAIL" || !hasViolation(res, CheckExclusion) {
		t.Fatalf("a backend without exclusion passed: %d overlaps, violations %v", res.Overlaps, res.Violations)
	}
	if res.Refused == 0 {
		t.Errorf("the fence refused no stale write of the overlapping holders")
	}
}

// reusesTokens is a broken backend: exclusion holds, but every grant has
// token 1, so a resource cannot tell a stale holder from the current one.
type reusesTokens struct{ driver.Driver }

func (b reusesTokens) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := b.Driver.Acquire(ctx, req)
	g.Token = 1
	return g, err
}

func TestBackendThatReusesTokensIsCaught(t *testing.T) {
	res := inProcess(t, "reuses-tokens", func(d *memlock.Driver) driver.Driver { return reusesTokens{d} })
	if res.Verdict() != "FAIL" || !hasViolation(res, CheckTokens) {
		t.Fatalf("a backend with constant tokens passed: %v", res.Violations)
	}
}

// history builds a synthetic history, one millisecond per event (plus the
// time let pass).
type history struct {
	t0     time.Time
	passed time.Duration
	events []Event
}

func (h *history) add(e Event) *history {
	if h.t0.IsZero() {
		h.t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	e.Time = h.now().Add(time.Millisecond)
	h.events = append(h.events, e)
	return h
}

// now is the time of the last event (t0 before any).
func (h *history) now() time.Time {
	if h.t0.IsZero() {
		h.t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return h.t0.Add(time.Duration(len(h.events))*time.Millisecond + h.passed)
}

// pass lets d go by before the next event.
func (h *history) pass(d time.Duration) *history {
	h.passed += d
	return h
}

// grant records a complete acquire of "x" by proc.
func (h *history) grant(proc string, hold int, token uint64) *history {
	h.add(Event{Proc: proc, Op: OpAcquire, Phase: Invoke, ID: int64(hold * 10), Hold: hold, Name: "x"})
	return h.add(Event{Proc: proc, Op: OpAcquire, Phase: OK, ID: int64(hold * 10), Hold: hold, Name: "x", Token: token})
}

// write records a write and the register's decision (seq) in between.
func (h *history) write(proc string, hold, n int, token uint64, seq int64, phase Phase, highest uint64) *history {
	id := int64(hold*10 + n)
	v := writeValue(proc, hold, n)
	h.add(Event{Proc: proc, Op: OpWrite, Phase: Invoke, ID: id, Hold: hold, Name: "x", Token: token, Value: v})
	h.add(Event{Proc: "register", Op: OpDecide, Phase: phase, Name: "x", Token: token, Value: v, Seq: seq, Highest: highest})
	return h.add(Event{Proc: proc, Op: OpWrite, Phase: phase, ID: id, Hold: hold, Name: "x", Token: token, Value: v, Seq: seq, Highest: highest})
}

func (h *history) release(proc string, hold int, token uint64, phase Phase) *history {
	h.add(Event{Proc: proc, Op: OpRelease, Phase: Invoke, ID: int64(hold*10 + 9), Hold: hold, Name: "x", Token: token})
	return h.add(Event{Proc: proc, Op: OpRelease, Phase: phase, ID: int64(hold*10 + 9), Hold: hold, Name: "x", Token: token})
}

// pausedHolder is the history of a holder (c0) paused past its TTL while
// c1 took the lock: c0 learns of the loss after c1's grant, as soon as it
// is resumed, its late write is refused, and its release fails — an
// overlap that the contract allows.
func pausedHolder() *history {
	h := &history{}
	h.grant("c0.0", 1, 5).write("c0.0", 1, 1, 5, 1, OK, 0)
	h.add(Event{Proc: "nemesis", Op: OpFault, Fault: "pause", Target: "c0.0"})
	h.grant("c1.0", 1, 6).write("c1.0", 1, 1, 6, 2, OK, 0)
	h.add(Event{Proc: "nemesis", Op: OpHeal, Fault: "pause", Target: "c0.0"})
	h.add(Event{Proc: "c0.0", Op: OpLost, Hold: 1, Name: "x", Token: 5})
	h.write("c0.0", 1, 2, 5, 3, Refused, 6).release("c0.0", 1, 5, Fail)
	h.write("c1.0", 1, 2, 6, 4, OK, 0).release("c1.0", 1, 6, OK)
	return h.grant("c2.0", 1, 7).release("c2.0", 1, 7, OK) // grants resume after the heal
}

func TestExplainedOverlapUnderFaultsPasses(t *testing.T) {
	r := Check(pausedHolder().events, Params{TTL: time.Second, Bound: time.Second, Faults: true})
	if r.Verdict() != "PASS" || r.Overlaps != 1 || r.Explained != 1 || r.Excused[ExcusePause] != 1 || r.Refused != 1 || r.Losses != 1 {
		t.Fatalf("got %s, %d overlaps (%d explained), %d refused, %d losses: %v", r.Verdict(), r.Overlaps, r.Explained, r.Refused, r.Losses, r.Violations)
	}
}

func TestOverlapWithoutFaultsFails(t *testing.T) {
	r := Check(pausedHolder().events, Params{TTL: time.Second, Bound: time.Second})
	if !hasViolation(r, CheckExclusion) {
		t.Fatalf("an overlap in a fault-free run passed: %v", r.Violations)
	}
}

func TestOverlapWhereOlderHolderNeverLearntFails(t *testing.T) {
	h := &history{}
	h.grant("c0.0", 1, 5).write("c0.0", 1, 1, 5, 1, OK, 0)
	h.grant("c1.0", 1, 6).write("c1.0", 1, 1, 6, 2, OK, 0)
	h.release("c0.0", 1, 5, OK).release("c1.0", 1, 6, OK)
	r := Check(h.events, Params{TTL: time.Second, Bound: time.Second, Faults: true})
	if !hasViolation(r, CheckExclusion) || !strings.Contains(r.Violations[0].Detail, "never learnt") {
		t.Fatalf("an unnoticed double grant passed under faults: %v", r.Violations)
	}
}

func TestFenceAcceptingLowerTokenFails(t *testing.T) {
	h := &history{}
	h.grant("c0.0", 1, 5).write("c0.0", 1, 1, 5, 1, OK, 0)
	h.grant("c1.0", 1, 6).write("c1.0", 1, 1, 6, 2, OK, 0)
	h.add(Event{Proc: "c0.0", Op: OpLost, Hold: 1, Name: "x", Token: 5})
	h.write("c0.0", 1, 2, 5, 3, OK, 0) // a broken fence accepts the stale write
	r := Check(h.events, Params{TTL: time.Second, Bound: time.Second, Faults: true})
	for _, c := range []string{CheckFence, CheckLinearizable, CheckExclusion} {
		if !hasViolation(r, c) {
			t.Errorf("a stale write accepted by the register: no %s violation in %v", c, r.Violations)
		}
	}
}

func TestReadOfLostWriteIsNotLinearizable(t *testing.T) {
	h := &history{}
	h.grant("c0.0", 1, 5).write("c0.0", 1, 1, 5, 1, OK, 0)
	h.add(Event{Proc: "c0.0", Op: OpRead, Phase: Invoke, ID: 100, Hold: 1, Name: "x"})
	h.add(Event{Proc: "c0.0", Op: OpRead, Phase: OK, ID: 100, Hold: 1, Name: "x", Token: 4, Value: "c9.0/1/1"})
	r := Check(h.events, Params{TTL: time.Second, Bound: time.Second})
	if !hasViolation(r, CheckLinearizable) {
		t.Fatalf("a read of a value never written passed: %v", r.Violations)
	}
}

func TestSlowRecoveryAfterHealFails(t *testing.T) {
	h := &history{}
	h.grant("c0.0", 1, 1).release("c0.0", 1, 1, OK)
	h.add(Event{Proc: "nemesis", Op: OpHeal, Fault: "restart"})
	for range 50 { // 50 ms of failing acquires
		h.add(Event{Proc: "c1.0", Op: OpAcquire, Phase: Fail, Err: "unavailable"})
	}
	h.grant("c1.0", 2, 2)
	r := Check(h.events, Params{TTL: 10 * time.Millisecond, Bound: 20 * time.Millisecond, Faults: true})
	if !hasViolation(r, CheckRecovery) {
		t.Fatalf("a grant 50ms after the heal passed a 30ms bound: %v", r.Violations)
	}
	if r = Check(h.events, Params{TTL: 10 * time.Millisecond, Bound: time.Second, Faults: true}); r.Verdict() != "PASS" {
		t.Fatalf("a grant 50ms after the heal failed a 1s bound: %v", r.Violations)
	}
}

func TestHistoryRoundTripsAndSurvivesTruncation(t *testing.T) {
	var b strings.Builder
	if err := WriteHistory(&b, pausedHolder().events); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	got, err := ReadHistory(strings.NewReader(text[:len(text)-10])) // the last line cut short
	if err != nil {
		t.Fatal(err)
	}
	if want := len(pausedHolder().events) - 1; len(got) != want {
		t.Fatalf("read %d events, want %d", len(got), want)
	}
	if _, err := ReadHistory(strings.NewReader("{bad\n" + text)); err == nil {
		t.Fatal("a corrupt line in the middle was accepted")
	}
}

// refusesRenewals is a backend whose every renewal is refused: each lease
// held past its first renewal (TTL/3) is lost then.
type refusesRenewals struct{ driver.Driver }

func (b refusesRenewals) Extend(context.Context, driver.Held, time.Duration) error {
	return dlock.ErrLeaseLost
}

// inProcessHolds is inProcess with holds longer than a third of the TTL
// (the first renewal) by at least holdsTTL/3 more, so that every hold is
// renewed (or lost) at least once even when timers run late on a loaded
// machine.
const holdsTTL = 600 * time.Millisecond

func inProcessHolds(t *testing.T, wrap func(*memlock.Driver) driver.Driver) []Event {
	t.Helper()
	srv := memlock.NewServer()
	dir := t.TempDir()
	res, err := Run(context.Background(), Config{
		Backend: "memlock", Clients: 2, Duration: 3 * time.Second, TTL: holdsTTL, Dir: dir,
		HoldMin: 2 * holdsTTL / 3, HoldMax: 5 * holdsTTL / 6,
		Open: func(context.Context) (*dlock.Client, error) { return dlock.New(wrap(memlock.New(srv))), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(res.History)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	events, err := ReadHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// TestWorkersRecordProvenDeadlines: every grant carries its proven
// deadline, within a TTL of the grant, and renewals move it forward.
func TestWorkersRecordProvenDeadlines(t *testing.T) {
	events := inProcessHolds(t, func(d *memlock.Driver) driver.Driver { return d })
	granted := map[string]time.Time{}
	renewed := 0
	for _, e := range events {
		k := e.Proc + "/" + strconv.Itoa(e.Hold)
		switch {
		case e.Op == OpAcquire && e.Phase == OK:
			if e.Expires.IsZero() || e.Expires.After(e.Time.Add(holdsTTL)) {
				t.Fatalf("grant %s: proven deadline %v, granted at %v with a TTL of %v", k, e.Expires, e.Time, holdsTTL)
			}
			granted[k] = e.Expires
		case e.Op == OpRenew:
			if !e.Expires.After(granted[k]) {
				t.Fatalf("renewal of %s did not move the deadline %v forward: %v", k, granted[k], e.Expires)
			}
			renewed++
		}
	}
	if len(granted) < 4 || renewed == 0 {
		t.Fatalf("%d grants, %d renewals recorded", len(granted), renewed)
	}
}

// TestWorkersRecordLossBeforeRelease: a lease lost at its first renewal is
// recorded as lost when the loss is decided, before the hold's release is
// called, and the checker counts it as noticed.
func TestWorkersRecordLossBeforeRelease(t *testing.T) {
	events := inProcessHolds(t, func(d *memlock.Driver) driver.Driver { return refusesRenewals{d} })
	released := map[string]bool{}
	lost := 0
	for _, e := range events {
		k := e.Proc + "/" + strconv.Itoa(e.Hold)
		switch {
		case e.Op == OpRelease && e.Phase == Invoke:
			released[k] = true
		case e.Op == OpLost:
			if released[k] {
				t.Fatalf("the loss of %s was recorded after its release was called", k)
			}
			lost++
		}
	}
	if r := Check(events, Params{TTL: holdsTTL, Bound: time.Second}); lost == 0 || r.Losses != lost {
		t.Fatalf("%d losses recorded, %d counted as noticed", lost, r.Losses)
	}
}
