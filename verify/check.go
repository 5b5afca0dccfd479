package verify

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Checks are the names of the properties a history is checked for.
const (
	CheckLinearizable = "linearizable" // the register's history is linearizable (porcupine)
	CheckFence        = "fence"        // the register never accepted a token lower than one it accepted
	CheckTokens       = "tokens"       // a grant's token exceeds every token granted before it was asked for
	CheckExclusion    = "exclusion"    // no two holds of a name overlap, or (under faults) every overlap is explained
	CheckRecovery     = "recovery"     // after a fault heals, a grant follows within TTL + bound
	CheckProgress     = "progress"     // the run granted at least one lease
)

// Violation is one broken property, with the evidence.
type Violation struct {
	Check  string
	Detail string
}

func (v Violation) String() string { return v.Check + ": " + v.Detail }

// Params are what the checkers need to know about the run.
type Params struct {
	// TTL is the lease length the clients asked for.
	TTL time.Duration
	// Bound is the stated recovery bound: after a fault heals, some client
	// must be granted a lease within TTL + Bound.
	Bound time.Duration
	// Until is when the clients stopped asking for leases (zero: at the
	// end of the history). Recovery is judged only while they asked.
	Until time.Time
	// Faults says faults were injected: overlapping holds are then allowed
	// if explained (see Check). Without faults any overlap is a violation.
	Faults bool
	// TokensMayReset: the backend documents that its tokens restart after a
	// server restart (no durable fencing); token regressions are reported
	// as notes, not violations.
	TokensMayReset bool
}

// Result is the verdict on one run and the numbers of its summary row.
type Result struct {
	Backend string
	Fault   string
	// Ops counts client operations invoked (acquire, write, read, release).
	Ops int
	// Grants counts successful acquires.
	Grants int
	// Overlaps counts the holds that overlapped a newer hold of the same
	// name (one paused holder overlapping three later grants counts once);
	// Explained of them met every condition of an allowed overlap with each.
	Overlaps, Explained int
	// Refused counts writes the fenced register refused (stale tokens).
	Refused int
	// Losses counts lease-loss notifications (Done closed by a loss).
	Losses int
	// Recovery is the longest time from a fault's heal to the next grant.
	Recovery time.Duration
	// Violations are the broken properties; Notes are facts worth reading
	// that break nothing.
	Violations []Violation
	Notes      []string
	// History is the path of the merged history file, when written.
	History string
}

// Verdict is "PASS" when no property was violated, else "FAIL".
func (r *Result) Verdict() string {
	if len(r.Violations) == 0 {
		return "PASS"
	}
	return "FAIL"
}

func (r *Result) violate(check, format string, args ...any) {
	r.Violations = append(r.Violations, Violation{check, fmt.Sprintf(format, args...)})
}

// hold is one lease as its client saw it.
type hold struct {
	proc  string
	n     int
	name  string
	token uint64
	// invoke is when the acquire was called, start when it returned the
	// grant: the server granted it somewhere in between.
	invoke, start time.Time
	// end is when the client stopped claiming it: the release call, the
	// moment it learnt of the loss, its kill, or the end of the history.
	end       time.Time
	endBy     string
	lost      bool
	killed    bool
	releaseOK bool
	values    []string // the values its writes carried
}

func (h *hold) String() string {
	return fmt.Sprintf("%s hold %d (token %d, %s..%s, ended by %s)", h.proc, h.n, h.token,
		h.start.Format("15:04:05.000000"), h.end.Format("15:04:05.000000"), h.endBy)
}

func (h *hold) close(t time.Time, by string) {
	if h.endBy == "" {
		h.end, h.endBy = t, by
	}
}

// Check judges a history (all processes' events, in time order). Timestamps
// are compared only as orderings: an operation took effect somewhere
// between its invocation and completion, so a hold certainly covers
// [acquire completed, release invoked], and two holds certainly overlapped
// when those intervals intersect.
//
//  1. linearizable: the register's operations as the clients saw them
//     (writes accepted or refused, reads) have a linearization in the
//     sequential model of a fenced register; tokens: the register accepted
//     tokens in non-decreasing order, and a grant's token is greater than
//     that of every grant completed before it was asked for.
//  2. exclusion, without faults: no two holds of one name overlap.
//  3. exclusion, under faults: every overlap of two holds is explained: one
//     of them (the loser; usually the one granted first) lost its lease and
//     learnt it (Done closed) or was killed, its release did not report
//     success, and none of its writes was accepted after the register
//     accepted a write of the other.
//  4. recovery: after each heal, the next grant comes within TTL + Bound.
func Check(events []Event, p Params) *Result {
	r := &Result{}
	if len(events) == 0 {
		r.violate(CheckProgress, "the history is empty")
		return r
	}
	endOfHistory := events[len(events)-1].Time
	holds := map[string]*hold{} // proc/hold
	var order []*hold
	open := map[string]*hold{} // proc → its hold that has not ended
	decisions := map[string]Event{}
	var decided []Event
	var heals []Event
	skewed := map[string]string{} // proc → its clock
	key := func(proc string, n int) string { return fmt.Sprintf("%s/%d", proc, n) }

	for _, e := range events {
		if e.Phase == Invoke && (e.Op == OpAcquire || e.Op == OpWrite || e.Op == OpRead || e.Op == OpRelease) {
			r.Ops++
		}
		switch e.Op {
		case OpAcquire:
			switch e.Phase {
			case Invoke:
				h := &hold{proc: e.Proc, n: e.Hold, name: e.Name, invoke: e.Time}
				holds[key(e.Proc, e.Hold)] = h
			case OK:
				h := holds[key(e.Proc, e.Hold)]
				if h == nil {
					continue
				}
				h.token, h.start = e.Token, e.Time
				order = append(order, h)
				open[e.Proc] = h
				r.Grants++
			}
		case OpWrite:
			if h := holds[key(e.Proc, e.Hold)]; h != nil && e.Phase == Invoke {
				h.values = append(h.values, e.Value)
			}
		case OpLost:
			r.Losses++
			if h := holds[key(e.Proc, e.Hold)]; h != nil {
				h.lost = true
				h.close(e.Time, "loss noticed")
			}
		case OpRelease:
			h := holds[key(e.Proc, e.Hold)]
			if h == nil {
				continue
			}
			switch e.Phase {
			case Invoke:
				h.close(e.Time, "release")
			case OK:
				h.releaseOK = true
				delete(open, e.Proc)
			case Fail:
				delete(open, e.Proc)
			}
		case OpKill:
			if h := open[e.Target]; h != nil {
				h.killed = true
				h.close(e.Time, "kill")
				delete(open, e.Target)
			}
		case OpDecide:
			decisions[e.Value] = e
			decided = append(decided, e)
			if e.Phase == Refused {
				r.Refused++
			}
		case OpHeal:
			heals = append(heals, e)
		case OpSpawn:
			if e.Fault != "" {
				skewed[e.Target] = e.Fault
			}
		}
	}
	for _, h := range order {
		h.close(endOfHistory, "end of history")
	}
	if r.Grants == 0 {
		r.violate(CheckProgress, "no lease was granted in %d operations", r.Ops)
	}

	checkLinearizable(r, events, decisions, endOfHistory)
	checkFence(r, decided)
	checkTokens(r, order, p)
	losers := checkExclusion(r, order, decisions, p)
	end := endOfHistory
	if !p.Until.IsZero() && p.Until.Before(end) {
		end = p.Until
	}
	checkRecovery(r, order, heals, end, p)
	noteSkewed(r, skewed, order, losers, decided)
	return r
}

// noteSkewed notes what became of each client whose clock was skewed: its
// grants, the holds it lost and learnt so, those that overlapped a newer
// holder's (explained: it was the loser), and its writes the fence refused.
func noteSkewed(r *Result, skewed map[string]string, order []*hold, losers map[*hold]bool, decided []Event) {
	procs := make([]string, 0, len(skewed))
	for p := range skewed {
		procs = append(procs, p)
	}
	sort.Strings(procs)
	for _, proc := range procs {
		var grants, lost, overlapped, refused int
		for _, h := range order {
			if h.proc != proc {
				continue
			}
			grants++
			if h.lost {
				lost++
			}
			if losers[h] {
				overlapped++
			}
		}
		for _, d := range decided {
			if p, _, _, ok := parseWriteValue(d.Value); ok && p == proc && d.Phase == Refused {
				refused++
			}
		}
		r.Notes = append(r.Notes, fmt.Sprintf("%s (%s): %d grants, %d leases lost and noticed, %d overlapped a newer holder's, %d stale writes refused",
			proc, skewed[proc], grants, lost, overlapped, refused))
	}
}

// The sequential model of the fenced register, per name.
type regState struct {
	token uint64
	value string
}

type regInput struct {
	write bool
	token uint64
	value string
}

type regOutput struct {
	accepted bool   // write
	highest  uint64 // refused write
	token    uint64 // read
	value    string // read
}

var registerModel = porcupine.Model{
	Init: func() any { return regState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(regState), input.(regInput), output.(regOutput)
		if !in.write {
			return out.token == st.token && out.value == st.value, st
		}
		if in.token >= st.token {
			return out.accepted, regState{in.token, in.value}
		}
		return !out.accepted && out.highest == st.token, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		if !in.write {
			return fmt.Sprintf("read() → %d %q", out.token, out.value)
		}
		if out.accepted {
			return fmt.Sprintf("write(%d, %q) → accepted", in.token, in.value)
		}
		return fmt.Sprintf("write(%d, %q) → refused (highest %d)", in.token, in.value, out.highest)
	},
	DescribeState: func(state any) string {
		st := state.(regState)
		return fmt.Sprintf("%d %q", st.token, st.value)
	},
}

// checkLinearizable builds the register's operations as the clients saw
// them and checks them with porcupine, one name at a time. A write whose
// reply was lost is taken with the outcome the register recorded and an
// open end (it may have taken effect any time after its call); one the
// register never received is left out, having had no effect.
func checkLinearizable(r *Result, events []Event, decisions map[string]Event, end time.Time) {
	type pending struct {
		e      Event
		client int
	}
	calls := map[string]pending{} // proc/id
	clients := map[string]int{}
	perName := map[string][]porcupine.Operation{}
	forever := end.UnixNano() + 1
	for _, e := range events {
		if e.Op != OpWrite && e.Op != OpRead {
			continue
		}
		k := fmt.Sprintf("%s/%d", e.Proc, e.ID)
		if e.Phase == Invoke {
			c, ok := clients[e.Proc]
			if !ok {
				c = len(clients)
				clients[e.Proc] = c
			}
			calls[k] = pending{e, c}
			continue
		}
		call, ok := calls[k]
		if !ok {
			continue
		}
		delete(calls, k)
		op := porcupine.Operation{ClientId: call.client, Call: call.e.Time.UnixNano(), Return: e.Time.UnixNano()}
		if e.Op == OpRead {
			if e.Phase != OK {
				continue
			}
			op.Input, op.Output = regInput{}, regOutput{token: e.Token, value: e.Value}
		} else {
			op.Input = regInput{write: true, token: call.e.Token, value: call.e.Value}
			switch e.Phase {
			case OK:
				op.Output = regOutput{accepted: true}
			case Refused:
				op.Output = regOutput{highest: e.Highest}
			default:
				d, ok := decisions[call.e.Value]
				if !ok {
					continue
				}
				op.Output, op.Return = regOutput{accepted: d.Phase == OK, highest: d.Highest}, forever
			}
		}
		perName[call.e.Name] = append(perName[call.e.Name], op)
	}
	// Writes whose process ended before they completed.
	for _, call := range calls {
		if call.e.Op != OpWrite {
			continue
		}
		if d, ok := decisions[call.e.Value]; ok {
			perName[call.e.Name] = append(perName[call.e.Name], porcupine.Operation{
				ClientId: call.client, Call: call.e.Time.UnixNano(), Return: forever,
				Input:  regInput{write: true, token: call.e.Token, value: call.e.Value},
				Output: regOutput{accepted: d.Phase == OK, highest: d.Highest},
			})
		}
	}
	names := make([]string, 0, len(perName))
	for n := range perName {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		switch porcupine.CheckOperationsTimeout(registerModel, perName[name], 30*time.Second) {
		case porcupine.Illegal:
			r.violate(CheckLinearizable, "the %d register operations on %q have no linearization as a fenced register", len(perName[name]), name)
		case porcupine.Unknown:
			r.Notes = append(r.Notes, fmt.Sprintf("linearizability of %q: the checker timed out (inconclusive)", name))
		}
	}
}

// checkFence checks the register's own decisions: accepted tokens never go
// down, and a refusal is only of a lower token.
func checkFence(r *Result, decided []Event) {
	sort.SliceStable(decided, func(i, j int) bool { return decided[i].Seq < decided[j].Seq })
	highest := map[string]uint64{}
	for _, d := range decided {
		h := highest[d.Name]
		switch {
		case d.Phase == OK && d.Token < h:
			r.violate(CheckFence, "decision %d accepted token %d of %s after accepting %d", d.Seq, d.Token, d.Value, h)
		case d.Phase == Refused && d.Token >= h:
			r.violate(CheckFence, "decision %d refused token %d of %s although the highest was %d", d.Seq, d.Token, d.Value, h)
		}
		if d.Phase == OK {
			highest[d.Name] = max(h, d.Token)
		}
	}
}

// checkTokens: a grant asked for after another grant of the same name
// completed must carry a greater token.
func checkTokens(r *Result, order []*hold, p Params) {
	byName := map[string][]*hold{}
	for _, h := range order {
		byName[h.name] = append(byName[h.name], h)
	}
	for _, hs := range byName {
		byStart := append([]*hold(nil), hs...)
		sort.Slice(byStart, func(i, j int) bool { return byStart[i].start.Before(byStart[j].start) })
		byInvoke := append([]*hold(nil), hs...)
		sort.Slice(byInvoke, func(i, j int) bool { return byInvoke[i].invoke.Before(byInvoke[j].invoke) })
		var top *hold
		i := 0
		for _, b := range byInvoke {
			for ; i < len(byStart) && byStart[i].start.Before(b.invoke); i++ {
				if top == nil || byStart[i].token > top.token {
					top = byStart[i]
				}
			}
			if top != nil && b.token <= top.token {
				msg := fmt.Sprintf("%s was granted token %d, not above token %d of %s granted before it asked", b.proc, b.token, top.token, top)
				if p.TokensMayReset {
					r.Notes = append(r.Notes, "tokens reset (the backend does not promise durable fencing): "+msg)
					top = b // the next grants are judged from the reset on
				} else {
					r.violate(CheckTokens, "%s", msg)
				}
			}
		}
	}
}

// checkExclusion finds the overlapping holds of each name and judges them;
// it returns the holds whose overlaps were explained, each as the loser.
func checkExclusion(r *Result, order []*hold, decisions map[string]Event, p Params) map[*hold]bool {
	hs := append([]*hold(nil), order...)
	sort.Slice(hs, func(i, j int) bool { return hs[i].start.Before(hs[j].start) })
	// firstAccepted is the register's first accepted decision for a hold.
	firstAccepted := func(h *hold) (int64, bool) {
		best := int64(math.MaxInt64)
		for _, v := range h.values {
			if d, ok := decisions[v]; ok && d.Phase == OK && d.Seq < best {
				best = d.Seq
			}
		}
		return best, best != math.MaxInt64
	}
	// explain lists what keeps the overlap from being the allowed kind with
	// loser as the holder whose lease was lost; nil if nothing does.
	explain := func(loser, winner *hold) []string {
		var why []string
		if !loser.lost && !loser.killed {
			why = append(why, fmt.Sprintf("%s never learnt it lost the lease", loser.proc))
		}
		if loser.releaseOK {
			why = append(why, fmt.Sprintf("%s's release reported success", loser.proc))
		}
		if seq, ok := firstAccepted(winner); ok {
			for _, v := range loser.values {
				if d, ok := decisions[v]; ok && d.Phase == OK && d.Seq > seq {
					why = append(why, fmt.Sprintf("%s's write %s was accepted (decision %d) after %s's (decision %d)", loser.proc, v, d.Seq, winner.proc, seq))
				}
			}
		}
		return why
	}
	losers, unexplained := map[*hold]bool{}, map[*hold]bool{}
	defer func() { r.Overlaps, r.Explained = len(losers)+len(unexplained), len(losers) }()
	for i, a := range hs {
		for _, b := range hs[i+1:] {
			if !b.start.Before(a.end) {
				break // sorted by start: no later hold overlaps a either
			}
			if b.name != a.name || !b.start.Before(b.end) || !a.start.Before(a.end) {
				continue
			}
			if !p.Faults {
				r.violate(CheckExclusion, "without faults, %s overlapped %s", a, b)
				unexplained[a] = true
				continue
			}
			// Usually the hold granted first (a) is the one that was lost;
			// but a grant can also be dead on arrival (b, lost at once,
			// with a lower token than a's).
			whyA := explain(a, b)
			if len(whyA) == 0 {
				losers[a] = true
				continue
			}
			whyB := explain(b, a)
			if len(whyB) == 0 {
				losers[b] = true
				if b.token < a.token {
					r.Notes = append(r.Notes, fmt.Sprintf("%s was granted after %s, with a lower token, and lost at once (the fence refuses its writes)", b, a))
				}
				continue
			}
			r.violate(CheckExclusion, "%s overlapped %s: %s", a, b, strings.Join(append(whyA, whyB...), "; "))
			unexplained[a] = true
		}
	}
	return losers
}

// checkRecovery: after each heal, the next grant (of any name) comes within
// TTL + Bound, judged up to end: when the clients stopped asking.
func checkRecovery(r *Result, order []*hold, heals []Event, end time.Time, p Params) {
	starts := make([]time.Time, 0, len(order))
	for _, h := range order {
		starts = append(starts, h.start)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	limit := p.TTL + p.Bound
	for _, heal := range heals {
		i := sort.Search(len(starts), func(i int) bool { return starts[i].After(heal.Time) })
		if i == len(starts) {
			if end.Sub(heal.Time) > limit {
				r.violate(CheckRecovery, "no grant in the %v after the heal of %s at %s", end.Sub(heal.Time).Round(time.Millisecond), heal.Fault, heal.Time.Format("15:04:05.000"))
			} else {
				r.Notes = append(r.Notes, fmt.Sprintf("the clients stopped asking %v after the heal of %s, before any grant: recovery not judged", end.Sub(heal.Time).Round(time.Millisecond), heal.Fault))
			}
			continue
		}
		d := starts[i].Sub(heal.Time)
		r.Recovery = max(r.Recovery, d)
		if d > limit {
			r.violate(CheckRecovery, "the first grant after the heal of %s at %s came %v later, above TTL %v + bound %v", heal.Fault, heal.Time.Format("15:04:05.000"), d.Round(time.Millisecond), p.TTL, p.Bound)
		}
	}
}
