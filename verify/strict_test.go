package verify

import (
	"strings"
	"testing"
	"time"
)

// The tests below are histories that the contract forbids, each of which an
// overlap checker that only asked "did the older holder lose its lease, and
// did the fence hold?" passed; and, next to them, the allowed overlaps.

// strict are the parameters of the hand-built histories: a TTL of one
// second, under faults.
var strict = Params{TTL: time.Second, Bound: time.Second, Faults: true}

// violationContains reports whether a violation of check mentions text.
func violationContains(r *Result, check, text string) bool {
	for _, v := range r.Violations {
		if v.Check == check && strings.Contains(v.Detail, text) {
			return true
		}
	}
	return false
}

// fault records a fault on target and returns a function that heals it.
func (h *history) fault(kind, target string) func() {
	h.add(Event{Proc: "nemesis", Op: OpFault, Fault: kind, Target: target})
	return func() { h.add(Event{Proc: "nemesis", Op: OpHeal, Fault: kind, Target: target}) }
}

// lost records that proc noticed the loss of its hold.
func (h *history) lost(proc string, hold int, token uint64) *history {
	return h.add(Event{Proc: proc, Op: OpLost, Hold: hold, Name: "x", Token: token, Err: "lease lost"})
}

// grantUntil is grant with the lease's proven deadline.
func (h *history) grantUntil(proc string, hold int, token uint64, expires time.Time) *history {
	h.add(Event{Proc: proc, Op: OpAcquire, Phase: Invoke, ID: int64(hold * 10), Hold: hold, Name: "x"})
	return h.add(Event{Proc: proc, Op: OpAcquire, Phase: OK, ID: int64(hold * 10), Hold: hold, Name: "x", Token: token, Expires: expires})
}

// partitionedHolder: c0, whose proven deadline is expiresIn after its
// grant, is partitioned; grantAfter later c1 is granted, and c0 notices the
// loss just after that. Its stale write is refused.
func partitionedHolder(expiresIn, grantAfter time.Duration) *history {
	h := &history{}
	h.grantUntil("c0.0", 1, 5, h.now().Add(expiresIn)).write("c0.0", 1, 1, 5, 1, OK, 0)
	heal := h.fault("net-partition", "c0.0")
	h.pass(grantAfter).grant("c1.0", 1, 6).write("c1.0", 1, 1, 6, 2, OK, 0)
	h.lost("c0.0", 1, 5)
	h.write("c0.0", 1, 2, 5, 3, Refused, 6).release("c0.0", 1, 5, Fail)
	heal()
	h.write("c1.0", 1, 2, 6, 4, OK, 0).release("c1.0", 1, 6, OK)
	return h.grant("c2.0", 1, 7).release("c2.0", 1, 7, OK)
}

// TestLateDoneUnderNetFails: c0's connection is partitioned; c1 is granted
// the lock while c0's lease still looks valid to c0, and c0 notices the
// loss only afterwards. The fence refused c0's stale write, but Done closed
// late: a resource without fencing took both holders' writes.
func TestLateDoneUnderNetFails(t *testing.T) {
	h := partitionedHolder(time.Second, 0)
	r := Check(h.events, strict)
	if r.Verdict() != "FAIL" || !violationContains(r, CheckExclusion, "Done closed late") {
		t.Fatalf("a loss noticed after the other grant passed under net: %v", r.Violations)
	}
	if !violationContains(r, CheckExclusion, "before c0.0's proven deadline") {
		t.Errorf("the violation does not say c1 was granted before c0's proven deadline: %v", r.Violations)
	}
}

// grantsEveryAcquire is the history of a backend that grants every acquire
// at once, with owner-checked release, under a fault aimed at a third
// process (target): c1 is granted while c0 holds; c0 notices nothing, its
// second write is refused by the fence, and it learns of the loss only when
// its release is refused.
func grantsEveryAcquire(kind, target string) *history {
	h := &history{}
	h.add(Event{Proc: "nemesis", Op: OpSpawn, Target: "c1.0", Fault: "clock rate 0.3", Rate: 0.3})
	h.grantUntil("c0.0", 1, 5, h.now().Add(time.Second)).write("c0.0", 1, 1, 5, 1, OK, 0)
	heal := h.fault(kind, target)
	h.grant("c1.0", 1, 6).write("c1.0", 1, 1, 6, 2, OK, 0)
	h.write("c0.0", 1, 2, 5, 3, Refused, 6)
	h.add(Event{Proc: "c0.0", Op: OpRelease, Phase: Invoke, ID: 19, Hold: 1, Name: "x", Token: 5})
	h.lost("c0.0", 1, 5) // Done closes as the release is refused
	h.add(Event{Proc: "c0.0", Op: OpRelease, Phase: Fail, ID: 19, Hold: 1, Name: "x", Token: 5, Err: "lease lost"})
	if kind == string(Kill) {
		h.add(Event{Proc: "nemesis", Op: OpKill, Fault: kind, Target: target})
	}
	heal()
	h.write("c1.0", 1, 2, 6, 4, OK, 0).release("c1.0", 1, 6, OK)
	return h.grant("c2.1", 1, 7).release("c2.1", 1, 7, OK)
}

func TestBackendThatGrantsEveryAcquireFailsUnderEveryFault(t *testing.T) {
	for _, f := range []struct{ kind, target string }{
		{"pause", "c2.0"}, {"kill", "c2.0"}, {"net-partition", "c2.0"}, {"net-cut-and-delay", "c2.0"},
		{"restart", "servers"}, {"member", "member 1"}, {"skew", "c1.0"},
	} {
		r := Check(grantsEveryAcquire(f.kind, f.target).events, strict)
		if r.Verdict() != "FAIL" || !violationContains(r, CheckExclusion, "only when its release was refused") {
			t.Errorf("%s: a double grant learnt only at release passed: %s, %v", f.kind, r.Verdict(), r.Violations)
		}
	}
}

// TestDoubleGrantThenKillOfOlderHolderFails: c1 is granted while c0 holds,
// and c0 is killed afterwards: the kill explains nothing that happened
// before it.
func TestDoubleGrantThenKillOfOlderHolderFails(t *testing.T) {
	h := &history{}
	h.grantUntil("c0.0", 1, 5, h.now().Add(time.Second)).write("c0.0", 1, 1, 5, 1, OK, 0)
	h.grant("c1.0", 1, 6).write("c1.0", 1, 1, 6, 2, OK, 0)
	h.add(Event{Proc: "nemesis", Op: OpFault, Fault: "kill", Target: "c0.0"})
	h.add(Event{Proc: "nemesis", Op: OpKill, Fault: "kill", Target: "c0.0"})
	h.add(Event{Proc: "nemesis", Op: OpHeal, Fault: "kill", Target: "c0.0"})
	h.write("c1.0", 1, 2, 6, 3, OK, 0).release("c1.0", 1, 6, OK)
	h.grant("c0.1", 1, 7).release("c0.1", 1, 7, OK)
	r := Check(h.events, strict)
	if r.Verdict() != "FAIL" || !violationContains(r, CheckExclusion, "was killed") {
		t.Fatalf("a double grant followed by a kill of the older holder passed: %v", r.Violations)
	}
}

// TestGrantAfterKillIsExcused: the grant completed after the kill began
// (the server freed the lock of a dead session at once), before the harness
// recorded the kill done.
func TestGrantAfterKillIsExcused(t *testing.T) {
	h := &history{}
	h.grantUntil("c0.0", 1, 5, h.now().Add(time.Second)).write("c0.0", 1, 1, 5, 1, OK, 0)
	h.add(Event{Proc: "c1.0", Op: OpAcquire, Phase: Invoke, ID: 10, Hold: 1, Name: "x"})
	h.add(Event{Proc: "nemesis", Op: OpFault, Fault: "kill", Target: "c0.0"})
	h.add(Event{Proc: "c1.0", Op: OpAcquire, Phase: OK, ID: 10, Hold: 1, Name: "x", Token: 6})
	h.add(Event{Proc: "nemesis", Op: OpKill, Fault: "kill", Target: "c0.0"})
	h.add(Event{Proc: "nemesis", Op: OpHeal, Fault: "kill", Target: "c0.0"})
	h.write("c1.0", 1, 1, 6, 2, OK, 0).release("c1.0", 1, 6, OK)
	h.grant("c1.0", 2, 7).release("c1.0", 2, 7, OK)
	r := Check(h.events, strict)
	if r.Verdict() != "PASS" || r.Overlaps != 1 || r.Excused[ExcuseKill] != 1 {
		t.Fatalf("a grant after the kill: %s, %d overlaps, excused %v: %v", r.Verdict(), r.Overlaps, r.Excused, r.Violations)
	}
}

// deadOnArrival: c1 asks first, c0 is granted token 6, then c1's grant of
// token 5 arrives late (its reply was held up); c1 notices the loss after
// noticeAfter.
func deadOnArrival(noticeAfter time.Duration) *history {
	h := &history{}
	h.add(Event{Proc: "c1.0", Op: OpAcquire, Phase: Invoke, ID: 10, Hold: 1, Name: "x"})
	h.grantUntil("c0.0", 1, 6, h.now().Add(time.Second)).write("c0.0", 1, 1, 6, 1, OK, 0)
	h.add(Event{Proc: "c1.0", Op: OpAcquire, Phase: OK, ID: 10, Hold: 1, Name: "x", Token: 5})
	h.pass(noticeAfter).lost("c1.0", 1, 5)
	h.write("c1.0", 1, 1, 5, 2, Refused, 6).release("c1.0", 1, 5, Fail)
	return h.write("c0.0", 1, 2, 6, 3, OK, 0).release("c0.0", 1, 6, OK)
}

func TestDeadOnArrivalWithLateLossNoticeFails(t *testing.T) {
	r := Check(deadOnArrival(2*time.Second).events, strict)
	if r.Verdict() != "FAIL" || !hasViolation(r, CheckExclusion) {
		t.Fatalf("a grant dead on arrival that noticed its loss 2 TTLs late passed: %v", r.Violations)
	}
	if r = Check(deadOnArrival(50*time.Millisecond).events, strict); r.Verdict() != "PASS" || r.Excused[ExcuseArrival] != 1 {
		t.Fatalf("a grant dead on arrival that noticed at once: %s, excused %v: %v", r.Verdict(), r.Excused, r.Violations)
	}
}

// TestStallAfterLateHealFails: the fault heals, and no grant follows before
// the clients stop: the harness leaves TTL + bound + 1s after the last heal,
// so this is a failure to recover, not an unjudged tail.
func TestStallAfterLateHealFails(t *testing.T) {
	h := &history{}
	h.grant("c0.0", 1, 1).release("c0.0", 1, 1, OK)
	h.add(Event{Proc: "nemesis", Op: OpHeal, Fault: "restart", Target: "servers"})
	p := strict
	p.Until = h.now().Add(5 * time.Millisecond)
	h.pass(time.Second).add(Event{Proc: "c1.0", Op: OpAcquire, Phase: Invoke, ID: 10, Hold: 1, Name: "x"})
	h.add(Event{Proc: "c1.0", Op: OpAcquire, Phase: Fail, ID: 10, Hold: 1, Name: "x", Err: "context deadline exceeded"})
	if r := Check(h.events, p); !violationContains(r, CheckRecovery, "no grant after the heal") {
		t.Fatalf("a heal with no grant after it passed: %v, notes %v", r.Violations, r.Notes)
	}
}

func TestHistoryMissingARegisterDecisionFails(t *testing.T) {
	h := &history{}
	h.grant("c0.0", 1, 5).write("c0.0", 1, 1, 5, 1, OK, 0)
	v := writeValue("c0.0", 1, 2)
	h.add(Event{Proc: "c0.0", Op: OpWrite, Phase: Invoke, ID: 12, Hold: 1, Name: "x", Token: 5, Value: v})
	h.add(Event{Proc: "c0.0", Op: OpWrite, Phase: OK, ID: 12, Hold: 1, Name: "x", Token: 5, Value: v, Seq: 2})
	h.release("c0.0", 1, 5, OK)
	r := Check(h.events, Params{TTL: time.Second, Bound: time.Second})
	if r.Verdict() != "FAIL" || !violationContains(r, CheckComplete, "no decision") {
		t.Fatalf("a history missing a register decision passed: %v", r.Violations)
	}
}

func TestClientThatExitedBadlyFails(t *testing.T) {
	h := &history{}
	h.add(Event{Proc: "nemesis", Op: OpSpawn, Target: "c0.0"})
	h.add(Event{Proc: "nemesis", Op: OpSpawn, Target: "c1.0"})
	h.grant("c0.0", 1, 5).release("c0.0", 1, 5, OK)
	h.add(Event{Proc: "nemesis", Op: OpExit, Target: "c0.0"})
	h.add(Event{Proc: "nemesis", Op: OpExit, Target: "c1.0", Err: "exit status 3"})
	r := Check(h.events, Params{TTL: time.Second, Bound: time.Second})
	if !violationContains(r, CheckComplete, "c1.0 exited with exit status 3") {
		t.Fatalf("a client that exited with status 3 passed: %v", r.Violations)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "c1.0 was never granted") {
		t.Errorf("a client never granted a lease is not reported: %v", r.Notes)
	}
}

// TestGrantAfterProvenDeadlineIsExcused: the backend granted c1 after c0's
// proven deadline, and c0's timer declared the loss a few milliseconds
// after c1's grant returned: Done closed on time.
func TestGrantAfterProvenDeadlineIsExcused(t *testing.T) {
	h := partitionedHolder(500*time.Millisecond, 500*time.Millisecond)
	r := Check(h.events, strict)
	if r.Verdict() != "PASS" || r.Excused[ExcuseDeadline] != 1 {
		t.Fatalf("a grant after the proven deadline: %s, excused %v: %v", r.Verdict(), r.Excused, r.Violations)
	}
	// A renewal that moved the deadline past c1's grant makes it a grant of
	// a lock still held.
	h2 := &history{t0: h.t0}
	for _, e := range h.events {
		h2.events = append(h2.events, e)
		if e.Op == OpWrite && e.Phase == OK && e.Value == "c0.0/1/1" {
			h2.events = append(h2.events, Event{Time: e.Time, Proc: "c0.0", Op: OpRenew, Hold: 1, Name: "x", Token: 5, Expires: e.Time.Add(2 * time.Second)})
		}
	}
	if r := Check(h2.events, strict); !violationContains(r, CheckExclusion, "before c0.0's proven deadline") {
		t.Fatalf("a grant before the renewed deadline passed: %v", r.Violations)
	}
}

// TestPauseExcusesOnlyGrantsInsideThePause: the same late notice as under
// pause, but with c1 granted before the pause began.
func TestPauseExcusesOnlyGrantsInsideThePause(t *testing.T) {
	h := &history{}
	h.grant("c0.0", 1, 5).write("c0.0", 1, 1, 5, 1, OK, 0)
	h.grant("c1.0", 1, 6).write("c1.0", 1, 1, 6, 2, OK, 0)
	heal := h.fault("pause", "c0.0")
	heal()
	h.lost("c0.0", 1, 5)
	h.write("c0.0", 1, 2, 5, 3, Refused, 6).release("c0.0", 1, 5, Fail)
	h.write("c1.0", 1, 2, 6, 4, OK, 0).release("c1.0", 1, 6, OK)
	r := Check(h.events, strict)
	if !violationContains(r, CheckExclusion, "Done closed late") {
		t.Fatalf("a grant before the pause was excused by it: %v", r.Violations)
	}
}

// TestSlowClockLoserIsExcusedAndOthersAreNot: under skew, the slow-clock
// process may be the loser; the process whose clock is only ahead may not.
func TestSlowClockLoserIsExcusedAndOthersAreNot(t *testing.T) {
	run := func(loser string, rate float64) *Result {
		h := &history{}
		h.add(Event{Proc: "nemesis", Op: OpSpawn, Target: loser, Rate: rate})
		h.grant(loser, 1, 5).write(loser, 1, 1, 5, 1, OK, 0)
		heal := h.fault("skew", loser)
		h.grant("c2.0", 1, 6).write("c2.0", 1, 1, 6, 2, OK, 0)
		h.write(loser, 1, 2, 5, 3, Refused, 6)
		h.add(Event{Proc: loser, Op: OpRelease, Phase: Invoke, ID: 19, Hold: 1, Name: "x", Token: 5})
		h.lost(loser, 1, 5)
		h.add(Event{Proc: loser, Op: OpRelease, Phase: Fail, ID: 19, Hold: 1, Name: "x", Token: 5})
		heal()
		h.release("c2.0", 1, 6, OK)
		return h.grant("c2.0", 2, 7).release("c2.0", 2, 7, OK).checked(strict)
	}
	if r := run("c1.0", SkewRate); r.Verdict() != "PASS" || r.Excused[ExcuseSkew] != 1 {
		t.Fatalf("the slow clock's overlap: %s, excused %v: %v", r.Verdict(), r.Excused, r.Violations)
	}
	if r := run("c0.0", 1); r.Verdict() != "FAIL" {
		t.Fatalf("an overlap of a process with a correct clock rate passed under skew: %v", r.Excused)
	}
}

func (h *history) checked(p Params) *Result { return Check(h.events, p) }

// TestAllowanceTurnsOverlapIntoNote: a backend's documented allowance for
// restarts reports the overlap as a note; without it, the run fails.
func TestAllowanceTurnsOverlapIntoNote(t *testing.T) {
	h := &history{}
	h.grantUntil("c0.0", 1, 5, h.now().Add(time.Second)).write("c0.0", 1, 1, 5, 1, OK, 0)
	heal := h.fault("restart", "servers")
	heal()
	h.grant("c1.0", 1, 1).write("c1.0", 1, 1, 1, 2, Refused, 5)
	h.release("c0.0", 1, 5, Fail).release("c1.0", 1, 1, OK)
	p := strict
	p.TokensMayReset = true
	if r := h.checked(p); r.Verdict() != "FAIL" {
		t.Fatalf("an overlap after a restart passed without an allowance: %v", r.Notes)
	}
	p.Allowances = []Allowance{{Name: "volatile-restart", Fault: Restart, Reason: "a restart without persistence forgets every lock"}}
	r := h.checked(p)
	if r.Verdict() != "PASS" || r.Excused["allowance volatile-restart"] != 1 || !strings.Contains(strings.Join(r.Notes, "\n"), "allowed overlap (volatile-restart") {
		t.Fatalf("the allowance: %s, excused %v, notes %v: %v", r.Verdict(), r.Excused, r.Notes, r.Violations)
	}
}

// breakCase is one variation of brokenHolder.
type breakCase struct {
	what          string
	name          string        // the lock the Break names (default "x")
	failed        bool          // the Break returned an error
	grantFirst    bool          // c1 was granted before the Break began
	renewed       bool          // a renewal of c0 was sent after the Break returned
	late          time.Duration // c0 noticed the loss this long after its proven deadline
	staleAccepted bool          // the register took c0's last write after c1's
}

// brokenHolder: c0 holds "x" (proven deadline 1s after its grant) and is
// partitioned; an operator breaks the lock; c1 is granted; c0 notices the
// loss at its deadline, its stale write is refused and its release fails.
func brokenHolder(bc breakCase) *history {
	h := &history{}
	deadline := h.now().Add(time.Second)
	h.grantUntil("c0.0", 1, 5, deadline).write("c0.0", 1, 1, 5, 1, OK, 0)
	heal := h.fault(string(BreakPartition), "c0.0")
	if bc.grantFirst {
		h.grant("c1.0", 1, 6)
	}
	name, phase := "x", OK
	if bc.name != "" {
		name = bc.name
	}
	if bc.failed {
		phase = Fail
	}
	h.add(Event{Proc: "nemesis", Op: OpBreak, Phase: Invoke, ID: 1, Name: name, Target: "c0.0"})
	h.add(Event{Proc: "nemesis", Op: OpBreak, Phase: phase, ID: 1, Name: name, Target: "c0.0"})
	if bc.renewed {
		deadline = h.now().Add(1500 * time.Millisecond) // sent after the Break: the TTL is 1s
		h.add(Event{Proc: "c0.0", Op: OpRenew, Hold: 1, Name: "x", Token: 5, Expires: deadline})
	}
	if !bc.grantFirst {
		h.grant("c1.0", 1, 6)
	}
	h.write("c1.0", 1, 1, 6, 2, OK, 0)
	h.pass(deadline.Sub(h.now())+bc.late).lost("c0.0", 1, 5)
	if bc.staleAccepted {
		h.write("c0.0", 1, 2, 5, 3, OK, 0)
	} else {
		h.write("c0.0", 1, 2, 5, 3, Refused, 6)
	}
	h.release("c0.0", 1, 5, Fail)
	heal()
	h.write("c1.0", 1, 2, 6, 4, OK, 0).release("c1.0", 1, 6, OK)
	return h.grant("c2.0", 1, 7).release("c2.0", 1, 7, OK)
}

// TestBreakExcusesOnlyTheLeaseItTook: an operator's Break of a partitioned
// holder's lock excuses the next grant, before the holder's deadline,
// only if the Break succeeded, named that lock, began before the grant and
// after the holder's own grant, no renewal of the holder came after it,
// and the holder gave up at its proven deadline; and never when the
// fence took the holder's stale write.
func TestBreakExcusesOnlyTheLeaseItTook(t *testing.T) {
	r := brokenHolder(breakCase{}).checked(strict)
	if r.Verdict() != "PASS" || r.Overlaps != 1 || r.Excused[ExcuseBreak] != 1 {
		t.Fatalf("a grant after a Break of a partitioned holder: %s, %d overlaps, excused %v: %v", r.Verdict(), r.Overlaps, r.Excused, r.Violations)
	}
	for _, bc := range []breakCase{
		{what: "a Break that failed", failed: true},
		{what: "a Break of another lock", name: "y"},
		{what: "a grant before the Break", grantFirst: true},
		{what: "a renewal sent after the Break", renewed: true},
		{what: "a holder that noticed 500ms after its deadline", late: 500 * time.Millisecond},
		{what: "a stale write the register took", staleAccepted: true},
	} {
		r := brokenHolder(bc).checked(strict)
		if r.Verdict() != "FAIL" || !hasViolation(r, CheckExclusion) || r.Excused[ExcuseBreak] != 0 {
			t.Errorf("%s was excused: %s, excused %v: %v", bc.what, r.Verdict(), r.Excused, r.Violations)
		}
	}
}

// evictedHolder: c0 holds "x" (proven deadline 1s after its grant); during
// a fault of kind on the server, c1 is granted; c0 notices the loss
// noticeAfter later (never, if negative); its stale write is refused.
func evictedHolder(kind string, grantFirst bool, noticeAfter time.Duration) *history {
	h := &history{}
	h.grantUntil("c0.0", 1, 5, h.now().Add(time.Second)).write("c0.0", 1, 1, 5, 1, OK, 0)
	if grantFirst {
		h.grant("c1.0", 1, 6)
	}
	heal := h.fault(kind, "server")
	if !grantFirst {
		h.grant("c1.0", 1, 6)
	}
	h.write("c1.0", 1, 1, 6, 2, OK, 0)
	if noticeAfter >= 0 {
		h.pass(noticeAfter).lost("c0.0", 1, 5)
		h.write("c0.0", 1, 2, 5, 3, Refused, 6).release("c0.0", 1, 5, Fail)
	}
	heal()
	h.write("c1.0", 1, 2, 6, 4, OK, 0).release("c1.0", 1, 6, OK)
	return h.grant("c2.0", 1, 7).release("c2.0", 1, 7, OK)
}

// TestEvictionAllowanceCoversOnlyALossSeenAtTheNextRenewal: with Redis's
// documented eviction allowance (an evicted lock is granted again at once;
// its holder learns it at its next renewal, within TTL/3), an overlap
// during the evict fault whose older holder noticed the loss within TTL/3
// of the other grant is a note; one noticed later, or never, or with the
// other grant made before the fault, or under another fault, fails.
//
// Redlock's allowance for a node restarted empty (partition-restart) is
// held to the same rule.
func TestEvictionAllowanceCoversOnlyALossSeenAtTheNextRenewal(t *testing.T) {
	for _, al := range []Allowance{
		{Name: "eviction", Fault: Evict, Notice: strict.TTL / 3, Reason: "an evicted lock is granted again before its holder's next renewal"},
		{Name: "empty-restart", Fault: PartitionRestart, Notice: strict.TTL / 3, Reason: "a node restarted empty lost the holder's lock"},
	} {
		p := strict
		p.Allowances = []Allowance{al}
		r := evictedHolder(string(al.Fault), false, 200*time.Millisecond).checked(p)
		if r.Verdict() != "PASS" || r.Excused["allowance "+al.Name] != 1 || !strings.Contains(strings.Join(r.Notes, "\n"), "allowed overlap ("+al.Name) {
			t.Fatalf("%s: a holder that noticed at its next renewal: %s, excused %v, notes %v: %v", al.Name, r.Verdict(), r.Excused, r.Notes, r.Violations)
		}
		for _, tc := range []struct {
			what        string
			kind        string
			grantFirst  bool
			noticeAfter time.Duration
		}{
			{"a loss noticed 800ms after the other grant (TTL 1s)", string(al.Fault), false, 800 * time.Millisecond},
			{"a loss never noticed", string(al.Fault), false, -1},
			{"a grant before the fault", string(al.Fault), true, 200 * time.Millisecond},
			{"an overlap under another fault", "net-partition", false, 200 * time.Millisecond},
		} {
			r := evictedHolder(tc.kind, tc.grantFirst, tc.noticeAfter).checked(p)
			if r.Verdict() != "FAIL" || !hasViolation(r, CheckExclusion) || r.Excused["allowance "+al.Name] != 0 {
				t.Errorf("%s: %s was allowed: %s, excused %v: %v", al.Name, tc.what, r.Verdict(), r.Excused, r.Violations)
			}
		}
	}
}
