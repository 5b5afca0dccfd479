package verify

import (
	"fmt"
	"math"
	"slices"
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
	CheckExclusion    = "exclusion"    // no two holds of a name overlap, except where the contract allows it
	CheckRecovery     = "recovery"     // after a fault heals, a grant follows within TTL + bound
	CheckObserve      = "observe"      // an election's observers report each leader with its own term, in order
	CheckProgress     = "progress"     // the run granted at least one lease
	CheckComplete     = "complete"     // the history is whole: every process recorded everything and exited well
)

// Violation is one broken property, with the evidence.
type Violation struct {
	Check  string
	Detail string
}

func (v Violation) String() string { return v.Check + ": " + v.Detail }

// Allowance is a documented, named exception of one backend: an overlap
// that its documentation says a fault can cause (Redis without persistence
// forgets its locks when it restarts). An overlap it covers is reported as
// a note, never counted as a pass in silence.
type Allowance struct {
	Name   string // short, shown in the table: "volatile-restart"
	Fault  Fault  // the fault during or after which the overlap is allowed
	Reason string // the documented reason
	// Notice, if not zero, is how soon after the other grant the older
	// holder must stop claiming the lock (release it, or notice the loss
	// while it holds it), plus the notice margin, for the allowance to
	// cover the overlap: the documented delay before the loss is seen
	// (an evicted lock: the holder's next renewal, within TTL/3).
	Notice time.Duration
}

// Params are what the checkers need to know about the run.
type Params struct {
	// TTL is the lease length the clients asked for.
	TTL time.Duration
	// Bound is the stated recovery bound: after a fault heals, some client
	// must be granted a lease within TTL + Bound.
	Bound time.Duration
	// Until is when the clients stopped asking for leases (zero: at the end
	// of the history); the harness heals the last fault at least TTL +
	// Bound + 1s before it.
	Until time.Time
	// Faults says faults were injected. Without faults any overlap is a
	// violation; with them, only the overlaps the contract allows pass (see
	// Check).
	Faults bool
	// TokensMayReset: the backend documents that its tokens restart after a
	// server restart (no durable fencing); token regressions are reported
	// as notes, not violations.
	TokensMayReset bool
	// Allowances are the backend's documented exceptions.
	Allowances []Allowance
}

// Why an overlap is excused (Result.Excused's keys).
const (
	ExcusePause    = "pause"           // the loser was paused (SIGSTOP) when the other was granted
	ExcuseSkew     = "skew"            // the loser's clock ran slow
	ExcuseKill     = "kill"            // the other grant completed after the loser was killed
	ExcuseDeadline = "deadline passed" // the other grant completed after the loser's proven deadline, and the loser stopped claiming at that deadline
	ExcuseArrival  = "dead on arrival" // the loser, granted a lower token, knew at once that it had lost
	ExcuseBreak    = "break"           // an operator's Break took the loser's lock before the other was granted, and the loser stopped claiming by its proven deadline
)

// Result is the verdict on one run and the numbers of its summary row.
type Result struct {
	Backend string
	Fault   string
	// Workload is what the clients took: "mutex", "mutex-fair", "semaphore 3",
	// "rwmutex", "election" (Config.Workload).
	Workload string
	// Ops counts client operations invoked (acquire, write, read, release).
	Ops int
	// Grants counts successful acquires.
	Grants int
	// Overlaps counts the holds that overlapped a newer hold of the same
	// name (one paused holder overlapping three later grants counts once);
	// Explained of them were excused or allowed with each: Excused counts
	// them by reason (the Excuse constants, or "allowance <name>").
	Overlaps, Explained int
	Excused             map[string]int
	// MostHeld is the most holds of one name claimed at once: 1 for a
	// mutex run without overlaps, up to the limit for a semaphore's,
	// readers together for a read-write lock's.
	MostHeld int
	// Observed counts the leaders an election's observers reported.
	Observed int
	// Refused counts writes the fenced register refused (stale tokens).
	Refused int
	// Losses counts lease losses the clients noticed while they held the
	// lease (not those learnt only at release).
	Losses int
	// Recovery is the longest time from a fault's heal to the next grant.
	Recovery time.Duration
	// Violations are the broken properties; Notes are facts worth reading
	// that break nothing (and the overlaps an Allowance covers).
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

// ExcusedSummary says, in one line, how many overlaps were excused and why.
func (r *Result) ExcusedSummary() string {
	keys := make([]string, 0, len(r.Excused))
	for k := range r.Excused {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", r.Excused[k], k))
	}
	return strings.Join(parts, ", ")
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
	end   time.Time
	endBy string
	// lost: the client noticed the loss while it held the lease (before
	// its release was called), at lostAt.
	lost   bool
	lostAt time.Time
	// lostAtRelease: the loss was learnt only when the release was refused.
	lostAtRelease bool
	releasing     bool
	killed        bool
	releaseOK     bool
	// expires is the latest proven deadline the client recorded (zero if
	// none).
	expires time.Time
	values  []string // the values its writes carried
	// limit is a semaphore permit's limit (0 for the other primitives);
	// shared marks a reader of a read-write lock.
	limit  int
	shared bool
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

// brk is an operator's Break that succeeded: of name, invoked at invoke,
// returned at done.
type brk struct {
	name         string
	invoke, done time.Time
}

// window is one fault as the harness applied it to one target, from its
// start to its heal (or the end of the history).
type window struct {
	fault      string
	target     string
	start, end time.Time
}

// noticeMargin is how late after the moment it was due a client may stop
// claiming a lease (its timer firing, a process resumed from a pause being
// scheduled) and still be taken as on time: scheduling on a loaded machine,
// not a broken promise.
func noticeMargin(ttl time.Duration) time.Duration { return max(100*time.Millisecond, ttl/10) }

// Check judges a history (all processes' events, in time order). Timestamps
// are compared only as orderings: an operation took effect somewhere
// between its invocation and completion, so a hold certainly covers
// [acquire completed, release invoked], and two holds certainly overlapped
// when those intervals intersect.
//
//  1. linearizable: the register's operations as the clients saw them
//     (writes accepted or refused, reads) have a linearization in the
//     sequential model of a fenced register; fence: the register accepted
//     tokens in non-decreasing order; tokens: a grant's token is greater
//     than that of every grant completed before it was asked for.
//  2. exclusion, without faults: no two holds of one name overlap.
//  3. exclusion, under faults: an overlap of an older hold A with a newer
//     grant B is excused only where the contract allows it (see
//     checkExclusion), and never when A's release reported success or a
//     write of the loser was accepted after the other's.
//  4. recovery: after each heal, a grant comes within TTL + Bound.
//  5. complete: every completed write has the register's decision, every
//     client process exited as it should, every client was granted a lease
//     (else a note).
func Check(events []Event, p Params) *Result {
	r := &Result{Excused: map[string]int{}}
	if len(events) == 0 {
		r.violate(CheckProgress, "the history is empty")
		return r
	}
	endOfHistory := events[len(events)-1].Time
	holds := map[string]*hold{} // proc/hold
	var order []*hold
	open := map[string]*hold{} // proc → its hold that has not ended
	decisions := map[string]Event{}
	var decided, heals, writes []Event
	skewed := map[string]string{} // proc → its clock
	slow := map[string]bool{}     // procs whose clock runs slow
	var windows []*window
	openWindow := map[string]*window{} // target → its fault that has not healed
	spawned, killedProcs := []string{}, map[string]bool{}
	var breaks []brk
	var observed []Event
	breaking := map[int64]Event{} // Break invocations by ID
	key := func(proc string, n int) string { return fmt.Sprintf("%s/%d", proc, n) }

	for _, e := range events {
		if e.Phase == Invoke && (e.Op == OpAcquire || e.Op == OpWrite || e.Op == OpRead || e.Op == OpRelease) {
			r.Ops++
		}
		switch e.Op {
		case OpAcquire:
			switch e.Phase {
			case Invoke:
				h := &hold{proc: e.Proc, n: e.Hold, name: e.Name, invoke: e.Time, limit: e.Limit, shared: e.Shared}
				holds[key(e.Proc, e.Hold)] = h
			case OK:
				h := holds[key(e.Proc, e.Hold)]
				if h == nil {
					continue
				}
				h.token, h.start, h.expires = e.Token, e.Time, e.Expires
				order = append(order, h)
				open[e.Proc] = h
				r.Grants++
			}
		case OpRenew:
			if h := holds[key(e.Proc, e.Hold)]; h != nil && e.Expires.After(h.expires) {
				h.expires = e.Expires
			}
		case OpWrite:
			if h := holds[key(e.Proc, e.Hold)]; h != nil && e.Phase == Invoke {
				h.values = append(h.values, e.Value)
			}
			if e.Phase == OK || e.Phase == Refused {
				writes = append(writes, e)
			}
		case OpLost:
			h := holds[key(e.Proc, e.Hold)]
			if h == nil {
				continue
			}
			if h.releasing {
				h.lostAtRelease = true // learnt from the refused release: not observed
				continue
			}
			if !h.lost {
				r.Losses++
				h.lost, h.lostAt = true, e.Time
			}
			h.close(e.Time, "loss noticed")
		case OpRelease:
			h := holds[key(e.Proc, e.Hold)]
			if h == nil {
				continue
			}
			switch e.Phase {
			case Invoke:
				h.releasing = true
				h.close(e.Time, "release")
			case OK:
				h.releaseOK = true
				delete(open, e.Proc)
			case Fail:
				delete(open, e.Proc)
			}
		case OpKill:
			killedProcs[e.Target] = true
			if h := open[e.Target]; h != nil {
				h.killed = true
				h.close(e.Time, "kill")
				delete(open, e.Target)
			}
			if w := openWindow[e.Target]; w != nil {
				w.end = e.Time
				delete(openWindow, e.Target)
			}
			if e.Err != "" {
				r.violate(CheckComplete, "client %s was killed at %s: %s", e.Target, e.Time.Format("15:04:05.000"), e.Err)
			}
		case OpDecide:
			decisions[e.Value] = e
			decided = append(decided, e)
			if e.Phase == Refused {
				r.Refused++
			}
		case OpFault:
			w := &window{fault: e.Fault, target: e.Target, start: e.Time, end: endOfHistory}
			windows = append(windows, w)
			openWindow[e.Target] = w
		case OpHeal:
			heals = append(heals, e)
			if w := openWindow[e.Target]; w != nil && e.Fault != "kill" {
				w.end = e.Time
				delete(openWindow, e.Target)
			}
		case OpSpawn:
			spawned = append(spawned, e.Target)
			if e.Fault != "" {
				skewed[e.Target] = e.Fault
			}
			if e.Rate > 0 && e.Rate < 1 {
				slow[e.Target] = true
			}
		case OpObserve:
			observed = append(observed, e)
		case OpBreak:
			switch e.Phase {
			case Invoke:
				breaking[e.ID] = e
			case OK:
				if inv, ok := breaking[e.ID]; ok {
					breaks = append(breaks, brk{name: e.Name, invoke: inv.Time, done: e.Time})
				}
			}
		case OpExit:
			switch {
			case e.Err == "" || killedProcs[e.Target]:
			case e.Excuse != "":
				r.Notes = append(r.Notes, fmt.Sprintf("client %s exited with %s: %s", e.Target, e.Err, e.Excuse))
			default:
				r.violate(CheckComplete, "client %s exited with %s: its history may be incomplete", e.Target, e.Err)
			}
		}
	}
	for _, h := range order {
		h.close(endOfHistory, "end of history")
	}
	if r.Grants == 0 {
		r.violate(CheckProgress, "no lease was granted in %d operations", r.Ops)
	}
	checkComplete(r, writes, decisions, spawned, order)

	checkLinearizable(r, events, decisions, endOfHistory)
	checkFence(r, decided)
	checkTokens(r, order, p)
	losers := checkExclusion(r, order, decisions, windows, slow, breaks, p)
	end := endOfHistory
	if !p.Until.IsZero() && p.Until.Before(end) {
		end = p.Until
	}
	checkRecovery(r, order, heals, end, p)
	noteSkewed(r, skewed, order, losers, decided)
	r.MostHeld = mostHeld(order)
	checkObserved(r, observed, order, p)
	return r
}

// checkObserved judges what an election's observers reported: each
// observer's terms never go back (unless the backend's tokens may restart
// with it); a term reported for a value was granted to the client process
// of that value, and that client had asked for it before it was reported.
// A term no client recorded a grant of is not judged: a campaign
// cancelled just as it was granted, or killed before recording it, leads
// for a moment that an observer may see.
func checkObserved(r *Result, observed []Event, order []*hold, p Params) {
	// A term's grants: one, unless the backend's tokens restarted with it
	// (TokensMayReset), when a term may have been granted again since.
	granted := map[string][]*hold{} // name/token
	for _, h := range order {
		k := fmt.Sprintf("%s/%d", h.name, h.token)
		granted[k] = append(granted[k], h)
	}
	last := map[string]Event{} // observer → its last report of a leader
	for _, e := range observed {
		if e.Token == 0 {
			continue
		}
		r.Observed++
		if prev, ok := last[e.Proc]; ok && e.Token < prev.Token && !p.TokensMayReset {
			r.violate(CheckObserve, "%s observed term %d (%s) at %s after term %d (%s)", e.Proc, e.Token, e.Value, e.Time.Format("15:04:05.000"), prev.Token, prev.Value)
		}
		last[e.Proc] = e
		hs := granted[fmt.Sprintf("%s/%d", e.Name, e.Token)]
		if len(hs) == 0 {
			continue
		}
		var to []string
		asked := false // the client of that value had asked for the term by then
		for _, h := range hs {
			if h.proc == e.Value {
				asked = asked || !e.Time.Before(h.invoke)
			}
			to = append(to, h.proc)
		}
		switch {
		case !slices.Contains(to, e.Value):
			r.violate(CheckObserve, "%s observed term %d led by %q at %s, but term %d was granted to %s", e.Proc, e.Token, e.Value, e.Time.Format("15:04:05.000"), e.Token, strings.Join(to, " and "))
		case !asked:
			r.violate(CheckObserve, "%s observed term %d of %s at %s, before %s asked for it", e.Proc, e.Token, e.Value, e.Time.Format("15:04:05.000"), e.Value)
		}
	}
}

// mostHeld is the most holds of one name claimed at once.
func mostHeld(order []*hold) int {
	type edge struct {
		t    time.Time
		name string
		d    int
	}
	var es []edge
	for _, h := range order {
		if h.start.Before(h.end) {
			es = append(es, edge{h.start, h.name, 1}, edge{h.end, h.name, -1})
		}
	}
	// An end at the moment of a start comes first: holds are [start, end).
	sort.Slice(es, func(i, j int) bool {
		if !es[i].t.Equal(es[j].t) {
			return es[i].t.Before(es[j].t)
		}
		return es[i].d < es[j].d
	})
	most, n := 0, map[string]int{}
	for _, e := range es {
		n[e.name] += e.d
		most = max(most, n[e.name])
	}
	return most
}

// checkComplete: every write the client saw decided has the register's
// decision (a history that lost one cannot be checked), and every client
// process that was started got a lease (else a note: starvation is no
// violation without fairness, but worth reading).
func checkComplete(r *Result, writes []Event, decisions map[string]Event, spawned []string, order []*hold) {
	for _, w := range writes {
		if _, ok := decisions[w.Value]; !ok {
			r.violate(CheckComplete, "%s's write %s was %s, but the register recorded no decision for it", w.Proc, w.Value, w.Phase)
		}
	}
	granted := map[string]bool{}
	for _, h := range order {
		granted[h.proc] = true
	}
	for _, proc := range spawned {
		if !granted[proc] {
			r.Notes = append(r.Notes, fmt.Sprintf("client %s was never granted a lease", proc))
		}
	}
}

// noteSkewed notes what became of each client whose clock was skewed: its
// grants, the holds it lost and learnt so, those that overlapped a newer
// holder's (excused: it was the loser), and its writes the fence refused.
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

// linearizeTimeout bounds porcupine's search for one name's history; a
// search that runs out is a note (inconclusive), not a violation, so the
// bound trades only thoroughness for a run that ends.
const linearizeTimeout = 30 * time.Second

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
		switch porcupine.CheckOperationsTimeout(registerModel, perName[name], linearizeTimeout) {
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
// it returns the holds excused as the loser of an overlap.
//
// Without faults every overlap is a violation. Under faults, an overlap of
// an older hold A with a newer grant B (B's acquire completed before A
// stopped claiming) is excused only where the contract allows it:
//
//   - pause: A's process was paused, B's grant completed after the pause
//     began, and A stopped claiming within noticeMargin of the resume (so B
//     was granted inside the pause, or in the moment A took to be
//     scheduled again after it);
//   - skew: A's process has a clock that runs slow (the clock assumption
//     broken on purpose);
//   - kill: A's process was killed, and B's grant completed after the kill
//     began;
//   - deadline passed: B's grant completed after A's proven deadline (the
//     last Lease.Expires A recorded), and A stopped claiming within
//     noticeMargin of that deadline: the backend granted B after A could no
//     longer prove its hold, and A's Done closed on time;
//   - break: an operator's Break of the name succeeded, B's grant completed
//     after the Break began and A's acquire began before the Break returned
//     (A's grant may have taken effect first: A's is a lease the Break
//     took), no renewal of A was sent after the Break returned (A's proven
//     deadline is at most a TTL after it), and A stopped claiming within
//     noticeMargin of that deadline: a holder cut off from the backend
//     cannot hear of the Break, and the contract has it give up at its
//     deadline;
//   - dead on arrival, B the loser: B's token is lower than A's, B's acquire
//     began before A's completed, and B noticed the loss within TTL/3 +
//     noticeMargin of its grant;
//   - an Allowance of the backend for the run's fault, if B's grant came
//     during or after such a fault and, if the allowance has a Notice, A
//     stopped claiming (released, or noticed the loss) within Notice +
//     noticeMargin of B's grant: a note, not a silent pass.
//
// Everywhere else the overlap is a violation: A's loss noticed after B's
// grant (Done closed late), learnt only when its release was refused, or
// never. No excuse holds if the loser's release reported success, or if a
// write of the loser was accepted after the register accepted one of the
// other.
func checkExclusion(r *Result, order []*hold, decisions map[string]Event, windows []*window, slow map[string]bool, breaks []brk, p Params) map[*hold]bool {
	hs := append([]*hold(nil), order...)
	sort.Slice(hs, func(i, j int) bool { return hs[i].start.Before(hs[j].start) })
	margin := noticeMargin(p.TTL)
	ts := func(t time.Time) string { return t.Format("15:04:05.000") }
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
	// fenced lists what no excuse can cover with loser as the holder that
	// lost: its release succeeded, or the register took its writes after
	// the other's.
	fenced := func(loser, winner *hold) []string {
		var why []string
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
	targeted := func(proc, fault string) []*window {
		var out []*window
		for _, w := range windows {
			if w.target == proc && strings.HasPrefix(w.fault, fault) {
				out = append(out, w)
			}
		}
		return out
	}
	// excuseOlder returns why the overlap of a (older) with b is allowed
	// with a as the loser, or "" and what stands against it.
	excuseOlder := func(a, b *hold) (string, string) {
		for _, w := range targeted(a.proc, string(Pause)) {
			if !b.start.Before(w.start) && !a.end.After(w.end.Add(margin)) {
				return ExcusePause, ""
			}
		}
		if slow[a.proc] {
			return ExcuseSkew, ""
		}
		if a.killed {
			for _, w := range targeted(a.proc, string(Kill)) {
				if !b.start.Before(w.start) && !w.start.After(a.end) {
					return ExcuseKill, ""
				}
			}
		}
		if !a.expires.IsZero() && !b.start.Before(a.expires) && !a.end.After(a.expires.Add(margin)) {
			return ExcuseDeadline, ""
		}
		for _, br := range breaks {
			if br.name == a.name && !b.start.Before(br.invoke) && a.invoke.Before(br.done) &&
				!a.expires.IsZero() && !a.expires.After(br.done.Add(p.TTL)) && !a.end.After(a.expires.Add(margin)) {
				return ExcuseBreak, ""
			}
		}
		var why string
		switch {
		case a.lost:
			why = fmt.Sprintf("%s noticed the loss at %s, after %s's grant completed at %s (Done closed late)", a.proc, ts(a.lostAt), b.proc, ts(b.start))
		case a.lostAtRelease:
			why = fmt.Sprintf("%s learnt of the loss only when its release was refused (never observed while held)", a.proc)
		case a.killed:
			why = fmt.Sprintf("%s was killed at %s, after %s's grant completed at %s, and had not noticed the loss", a.proc, ts(a.end), b.proc, ts(b.start))
		default:
			why = fmt.Sprintf("%s never learnt it lost the lease", a.proc)
		}
		if !a.expires.IsZero() && b.start.Before(a.expires) {
			why += fmt.Sprintf("; %s was granted before %s's proven deadline %s", b.proc, a.proc, ts(a.expires))
		}
		return "", why
	}
	// excuseNewer: b, granted a lower token while a held, was dead on
	// arrival and knew it at once.
	excuseNewer := func(a, b *hold) bool {
		return b.token < a.token && b.invoke.Before(a.start) && b.lost &&
			!b.lostAt.After(b.start.Add(p.TTL/3+margin))
	}
	allowed := func(a, b *hold) *Allowance {
		for i, al := range p.Allowances {
			if al.Notice > 0 && (a.endBy != "release" && a.endBy != "loss noticed" || a.end.After(b.start.Add(al.Notice+margin))) {
				continue
			}
			for _, w := range windows {
				if strings.HasPrefix(w.fault, string(al.Fault)) && !b.start.Before(w.start) && !a.start.After(w.end) {
					return &p.Allowances[i]
				}
			}
		}
		return nil
	}

	losers, unexcused := map[*hold]bool{}, map[*hold]bool{}
	excusedAs := map[*hold]string{}
	var permitted []*hold // semaphore grants made while another permit was held
	defer func() {
		r.Overlaps, r.Explained = len(losers)+len(unexcused), len(losers)
		for h, why := range excusedAs {
			if losers[h] {
				r.Excused[why]++
			}
		}
	}()
	for i, a := range hs {
		for _, b := range hs[i+1:] {
			if !b.start.Before(a.end) {
				break // sorted by start: no later hold overlaps a either
			}
			if b.name != a.name || !b.start.Before(b.end) || !a.start.Before(a.end) {
				continue
			}
			if a.shared && b.shared {
				continue // two readers of a read-write lock
			}
			if a.limit > 1 || b.limit > 1 {
				permitted = append(permitted, b) // judged by counting, below
				continue
			}
			if !p.Faults {
				r.violate(CheckExclusion, "without faults, %s overlapped %s", a, b)
				unexcused[a] = true
				continue
			}
			excuse, against := excuseOlder(a, b)
			if excuse != "" {
				if f := fenced(a, b); len(f) > 0 {
					r.violate(CheckExclusion, "%s overlapped %s (%s): %s", a, b, excuse, strings.Join(f, "; "))
					unexcused[a] = true
					continue
				}
				losers[a] = true
				if _, ok := excusedAs[a]; !ok {
					excusedAs[a] = excuse
				}
				continue
			}
			if excuseNewer(a, b) {
				if f := fenced(b, a); len(f) > 0 {
					r.violate(CheckExclusion, "%s overlapped %s (%s): %s", a, b, ExcuseArrival, strings.Join(f, "; "))
					unexcused[b] = true
					continue
				}
				losers[b] = true
				if _, ok := excusedAs[b]; !ok {
					excusedAs[b] = ExcuseArrival
				}
				continue
			}
			if al := allowed(a, b); al != nil && len(fenced(a, b)) == 0 {
				r.Notes = append(r.Notes, fmt.Sprintf("allowed overlap (%s: %s): %s overlapped %s: %s", al.Name, al.Reason, a, b, against))
				losers[a] = true
				excusedAs[a] = "allowance " + al.Name
				continue
			}
			why := append([]string{against}, fenced(a, b)...)
			r.violate(CheckExclusion, "%s overlapped %s: %s", a, b, strings.Join(why, "; "))
			unexcused[a] = true
		}
	}
	checkPermits(r, hs, permitted, p, permitExcuses{older: excuseOlder, newer: excuseNewer, allowed: allowed, fenced: fenced}, losers, unexcused, excusedAs)
	return losers
}

// permitExcuses are checkExclusion's judgements of one overlap, lent to
// checkPermits.
type permitExcuses struct {
	older   func(a, b *hold) (string, string)
	newer   func(a, b *hold) bool
	allowed func(a, b *hold) *Allowance
	fenced  func(loser, winner *hold) []string
}

// checkPermits judges the grants of a semaphore made while other permits
// of the name were held. A grant B broke the limit if, when it completed,
// as many holds as B's limit were still claimed (the contract grants a
// request only while fewer than its own Limit leases are held). Under
// faults, a hold that had lost its permit in a way the contract allows
// (the excuses of checkExclusion, each judged as for a mutex between that
// hold and B) is not counted; B itself is excused if it was dead on
// arrival. The holds excused are the losers; B is the overlap that counts
// when the limit was broken.
func checkPermits(r *Result, hs, permitted []*hold, p Params, ex permitExcuses, losers, unexcused map[*hold]bool, excusedAs map[*hold]string) {
	judged := map[*hold]bool{}
	for _, b := range permitted {
		if judged[b] {
			continue
		}
		judged[b] = true
		var held []*hold
		for _, a := range hs {
			if !a.start.Before(b.start) {
				break
			}
			if a.name == b.name && b.start.Before(a.end) && a.start.Before(a.end) {
				held = append(held, a)
			}
		}
		limit := max(b.limit, 1)
		if len(held) < limit {
			continue
		}
		list := func(hs []*hold) string {
			var ss []string
			for _, h := range hs {
				ss = append(ss, h.String())
			}
			return strings.Join(ss, "; ")
		}
		if !p.Faults {
			r.violate(CheckExclusion, "without faults, %s was granted while %d permits of %d were held: %s", b, len(held), limit, list(held))
			unexcused[b] = true
			continue
		}
		var stand []*hold
		var against []string
		excused := map[*hold]string{}
		for _, a := range held {
			excuse, why := ex.older(a, b)
			if excuse == "" {
				if al := ex.allowed(a, b); al != nil {
					excuse = "allowance " + al.Name
					r.Notes = append(r.Notes, fmt.Sprintf("allowed overlap (%s: %s): %s held a permit when %s was granted: %s", al.Name, al.Reason, a, b, why))
				}
			}
			if f := ex.fenced(a, b); excuse != "" && len(f) == 0 {
				excused[a] = excuse
				continue
			} else if len(f) > 0 {
				why = strings.Join(append([]string{why}, f...), "; ")
			}
			stand, against = append(stand, a), append(against, strings.TrimPrefix(why, "; "))
		}
		if len(stand) < limit {
			for a, e := range excused {
				losers[a] = true
				if _, ok := excusedAs[a]; !ok {
					excusedAs[a] = e
				}
			}
			continue
		}
		doa := false // no excuse holds for b if its own release succeeded
		for _, a := range stand {
			doa = doa || !b.releaseOK && ex.newer(a, b)
		}
		if doa {
			losers[b] = true
			if _, ok := excusedAs[b]; !ok {
				excusedAs[b] = ExcuseArrival
			}
			continue
		}
		r.violate(CheckExclusion, "%s was granted while %d permits of %d were held and not lost as the contract allows: %s: %s", b, len(stand), limit, list(stand), strings.Join(against, "; "))
		unexcused[b] = true
	}
}

// checkRecovery: after each heal, a grant (of any name) comes within TTL +
// Bound. The harness heals the last fault early enough for this to be
// seen, so a heal with no grant after it is a violation.
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
			r.violate(CheckRecovery, "no grant after the heal of %s at %s (the clients asked for %v more)", heal.Fault, heal.Time.Format("15:04:05.000"), max(end.Sub(heal.Time), 0).Round(time.Millisecond))
			continue
		}
		d := starts[i].Sub(heal.Time)
		r.Recovery = max(r.Recovery, d)
		if d > limit {
			r.violate(CheckRecovery, "the first grant after the heal of %s at %s came %v later, above TTL %v + bound %v", heal.Fault, heal.Time.Format("15:04:05.000"), d.Round(time.Millisecond), p.TTL, p.Bound)
		}
	}
}
