package temporallock

import (
	"slices"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/dlock/dlock/driver"
)

// Names of the fair mutex workflow and of the messages it handles. They are
// part of the wire format between clients, workers and recorded histories:
// never rename them.
const (
	mutexWorkflowName = "dlock.Mutex"

	updAcquire = "acquire" // acquireReq -> reply: granted, queued or busy
	updWait    = "wait"    // ownerReq -> reply: granted, queued (ask again) or gone
	updExtend  = "extend"  // extendReq -> reply: ok or lost
	updRelease = "release" // ownerReq -> reply: ok (released, or left the queue) or lost
	updBreak   = "break"   // none -> reply: ok or free
	qryState   = "state"   // -> mutexState
	qryPlace   = "place"   // owner -> reply: as a "wait" answered at once

	// Signals from lock-holding workflows (the workflow-side API), which
	// cannot call updates: the same requests, answered by signals back.
	sigAcquire = "dlock.acquire" // acquireReq with ReplyTo
	sigExtend  = "dlock.extend"  // extendReq
	sigRelease = "dlock.release" // ownerReq

	// Signals to a lock-holding workflow, suffixed with the owner key.
	sigGrantPrefix  = "dlock.grant."  // grantMsg
	sigLostPrefix   = "dlock.lost."   // grantMsg (Token of the lost lease)
	sigQueuedPrefix = "dlock.queued." // grantMsg{}: "are you still there?" (see probeWaiter)
)

// Reply statuses.
const (
	stGranted = "granted"
	stQueued  = "queued"
	stBusy    = "busy"
	stGone    = "gone" // not holder and not queued
	stOK      = "ok"
	stLost    = "lost"
	stFree    = "free"
)

// defaultHistoryLimit is the history length at which the mutex workflow
// continues as new, carrying its state. Temporal also suggests continuing
// after 2000 updates (history.maxTotalUpdates × 0.9); both keep the history
// bounded.
const defaultHistoryLimit = 3000

// entry is a holder or a queued waiter.
type entry struct {
	Owner  string
	TTL    time.Duration
	Holder []byte `json:",omitempty"`
	// Expires is, for the holder, the end of its lease; for a client
	// waiter, the time by which it must ask again (its presence), or it
	// is dropped from the queue; for a workflow waiter (ReplyTo), the
	// time of its next probe (see probeWaiter). Workflow time.
	Expires time.Time
	// Token and GrantedAt are set when the entry holds the lock.
	Token     uint64    `json:",omitempty"`
	GrantedAt time.Time `json:",omitzero"`
	// ReplyTo is the workflow that asked, for the workflow-side API; it
	// is answered by signal, and probed by signal while it waits.
	ReplyTo *caller `json:",omitempty"`
}

type caller struct {
	WorkflowID string
	RunID      string
}

// mutexState is the whole state of one name's mutex workflow: what it
// carries across continue-as-new and what the "state" query returns.
type mutexState struct {
	Name string
	// Token is the last fencing token granted. The first run starts it at
	// its start time in microseconds, so that even a mutex workflow that
	// was terminated and started anew hands out tokens above the old
	// one's (unless that granted more than one a microsecond on average).
	Token uint64
	// Holder is the holder, or the first of several, in grant order: a
	// semaphore's permits or a read-write lock's readers; More are the
	// others. An entry of Queue is granted when driver.QueueHolders says
	// it holds in the queue Holder, More..., Queue... (see admits).
	Holder *entry  `json:",omitempty"`
	More   []entry `json:",omitempty"`
	Queue  []entry `json:",omitempty"`
	// Recovered: the last lease ended without a release (expiry or break).
	Recovered bool `json:",omitempty"`
	// HistoryLimit overrides defaultHistoryLimit (tests use a small one).
	HistoryLimit int `json:",omitempty"`
}

type acquireReq struct {
	Owner   string
	TTL     time.Duration
	Holder  []byte `json:",omitempty"`
	Wait    bool
	ReplyTo *caller `json:",omitempty"`
	// Poll: as in ownerReq; a waiter queued too far back to hold a wait
	// open is told at once when to ask.
	Poll bool `json:",omitempty"`
}

type ownerReq struct {
	Owner string
	// Poll, on a "wait": the waiter sleeps for the reply's RetryAfter
	// when told to, rather than expecting every wait to be held open.
	// Waiters of older versions of this package do not set it, and their
	// waits are held open as before.
	Poll bool `json:",omitempty"`
}

type extendReq struct {
	Owner string
	Token uint64
	TTL   time.Duration
}

type reply struct {
	Status    string
	Token     uint64 `json:",omitempty"`
	Recovered bool   `json:",omitempty"`
	// Age is how long ago, by the workflow's clock, the lock was granted,
	// and Waited how long a wait was held open before it returned: the
	// grant happened Waited-Age after the wait reached the workflow, which
	// is after the client sent it.
	Age    time.Duration `json:",omitempty"`
	Waited time.Duration `json:",omitempty"`
	// RetryAfter, on a queued reply to a polling wait: the waiter is too
	// far back for its wait to be held open, and asks again after this.
	RetryAfter time.Duration `json:",omitempty"`
	// Query, with RetryAfter: the waiter is farther back still, and asks
	// again by the "place" query rather than by update.
	Query bool `json:",omitempty"`
	// Waiting, on a granted or queued reply to an acquire or a wait: the
	// client waiters queued when it was made. Mutex workflows of older
	// versions of this package leave it 0.
	Waiting int `json:",omitempty"`
}

type grantMsg struct {
	Token     uint64
	Recovered bool `json:",omitempty"`
}

// mutex is the running mutex workflow.
type mutex struct {
	s mutexState
	// changed wakes the main loop to re-arm its timer and to check
	// continue-as-new.
	changed bool
	// draining: the run is about to continue as new; waits return at once
	// so that no handler is left running.
	draining bool
	// turnover is a moving average of the time from one holder learning
	// of its grant to the next grant: the hold plus the hand-over, not the
	// time the name sat free (settle). It tells a polling waiter far back
	// in the queue when to ask again.
	// pickedUp is when the holder learned of its grant: at the grant if
	// its wait was open (listening), else when it next asked (zero until
	// then) — the time a grant sits unnoticed is left out, or slow pick-ups
	// would make waiters poll later and later. Not carried across
	// continue-as-new: a new run learns them anew.
	turnover  time.Duration
	pickedUp  time.Time
	listening map[string]int // owners with a wait open, and how many
	// probing: workflow waiters are probed (see probeWaiter). Runs
	// started by versions of this package that did not probe replay
	// without it.
	probing bool
	// signals: the channels of the workflow-side API's signals.
	// signalsInLoop: the main loop receives them (see signalsVersion);
	// runs started before that replay with a coroutine of their own
	// receiving them (receiveSignals).
	signals       [3]workflow.ReceiveChannel
	signalsInLoop bool
}

// probeVersion is the change ID under which the mutex workflow probes
// its workflow waiters.
const probeVersion = "probe-workflow-waiters"

// countedVersion is the change ID under which the mutex workflow grants
// a name to several holders at once (semaphores, readers). It is asked
// for lazily, by admits, at the first grant whose outcome depends on it:
// a history recorded by a version of this package that kept one holder
// (a counted request then waited for the holder to go) replays with
// DefaultVersion and keeps doing so, while a run that the new code runs
// live records the marker there and grants by the counted rule from then
// on, including a run started before the upgrade.
const countedVersion = "counted-leases"

// signalsVersion is the change ID under which the mutex workflow receives
// the workflow-side API's signals in its main loop rather than in a
// coroutine of its own. Each coroutine is a goroutine in every worker
// that keeps the workflow in its cache (the client processes' workers
// keep every lock they touched), so a held lock cost two goroutines there
// and now costs one, the main loop's, which the SDK needs to run the
// workflow at all (testHeldLockKeepsOneGoroutine).
const signalsVersion = "signals-in-main-loop"

// queueBySignalVersion is the change ID under which the mutex workflow
// queues a client waiter that sends its acquire as a signal.
const queueBySignalVersion = "queue-by-signal"

// playOlder is set by a test to play a mutex workflow of a version of
// this package before queueBySignalVersion, which ignores a client's
// acquire signal.
var playOlder atomic.Bool

// Temporal admits a limited number of updates in flight on one workflow
// (history.maxInFlightUpdates, 10 by default), and a wait held open is
// one; an update refused for the limit also aborts the updates in flight
// (see "Many waiters" in the package doc). So only the first longPolls
// client waiters of the queue hold their waits open; the waiters behind
// them poll, each at the time the grants ahead of it should take
// (pollAfter), which leaves room for the holder's renewals and for
// arrivals.
const longPolls = 4

// queryFrom is how many client waiters must be ahead of a polling waiter
// for it to poll by the "place" query rather than by update. Keep updates
// few on a busy mutex workflow: each runs a workflow task, more than the
// server's limit in flight are refused, and a speculative task that fails
// makes the server abort every update in flight, leaving the lock granted
// to a waiter that never hears of it. A query takes no update slot and adds
// nothing to the history. The waiters just behind the long-polling ones
// still poll by update, because an update that finds its waiter among the
// first holds the wait open at once, saving a round trip.
const queryFrom = longPolls + 3

// minPoll is the shortest interval between a polling waiter's requests.
const minPoll = 250 * time.Millisecond

// pollAfter is how long a client waiter with ahead client waiters in front
// of it waits before asking again, at now: the time the grants ahead of it
// should take, less the long-polling waiters' share, so that it is back to
// long-polling before its turn; at least minPoll, and at most a wait
// slice.
//
// A grant is expected to take the turnover; but if the present holder has
// held the lock, since it learnt of its grant, over four times that and
// over a second, as long as it has held: a hold that has lasted is likely
// to last, and a run that has granted nothing yet has no turnover.
// Without that, a queue behind a long hold polled every minPoll, each
// waiter: 20 waiters sent 80 updates a second, faster than a busy worker
// ran them; refused for the in-flight limit and retried with back-off, a
// waiter's requests could stall until its place expired. (Shorter holds
// do not count, as a poller back late leaves the lock granted and
// unnoticed, while one back early costs an update; nor does the time a
// grant sits unnoticed until a polling waiter asks, or the waiters behind
// would poll later and later, and each in turn be noticed late.)
func (m *mutex) pollAfter(now time.Time, ahead int, ttl time.Duration) time.Duration {
	per := m.turnover
	if held := now.Sub(m.pickedUp); m.s.Holder != nil && !m.pickedUp.IsZero() && held > max(4*per, time.Second) {
		per = held
	}
	return min(max(per*time.Duration(ahead-longPolls+1), minPoll), waitSlice(ttl))
}

// MutexWorkflow is the fair mutex of one lock name: a FIFO queue of
// waiters, the holder and its lease, and the fencing-token counter. Clients
// talk to it by update (acquire, wait, extend, release, break) and query
// (state); lock-holding workflows by signal. It runs until terminated,
// continuing as new to keep its history short; an idle one has no timer.
func MutexWorkflow(ctx workflow.Context, s mutexState) error {
	m := &mutex{s: s, listening: map[string]int{}}
	m.probing = workflow.GetVersion(ctx, probeVersion, workflow.DefaultVersion, 1) >= 1
	if m.probing {
		now := workflow.Now(ctx)
		for i, e := range m.s.Queue {
			if e.ReplyTo != nil && e.Expires.IsZero() { // queued by a run that did not probe
				m.s.Queue[i].Expires = now.Add(e.TTL)
			}
		}
	}
	if m.s.Holder != nil {
		// Carried from the previous run: it has held at least since now,
		// which is what pollAfter needs to know.
		m.pickedUp = workflow.Now(ctx)
	}
	if m.s.Token == 0 {
		m.s.Token = uint64(workflow.Now(ctx).UnixMicro())
	}
	if err := m.register(ctx); err != nil {
		return err
	}
	for i, name := range []string{sigAcquire, sigExtend, sigRelease} {
		m.signals[i] = workflow.GetSignalChannel(ctx, name)
	}
	m.signalsInLoop = workflow.GetVersion(ctx, signalsVersion, workflow.DefaultVersion, 1) >= 1
	if !m.signalsInLoop {
		m.receiveSignals(ctx)
	}

	var timer workflow.Future
	var timerAt time.Time
	var cancelTimer workflow.CancelFunc
	for {
		if m.signalsInLoop {
			m.drainSignals(ctx)
		}
		now := workflow.Now(ctx)
		m.expire(ctx, now)

		if m.shouldContinueAsNew(ctx) {
			m.draining = true
			if err := awaitHandlersFinished(ctx); err != nil {
				return err
			}
			m.drainSignals(ctx)
			m.expire(ctx, workflow.Now(ctx))
			return workflow.NewContinueAsNewError(ctx, MutexWorkflow, m.s)
		}

		// One timer for the earliest deadline; re-armed only when a
		// deadline comes earlier than the armed one, so that renewals
		// (which push deadlines later) add no timer events.
		if next := m.nextDeadline(); !next.IsZero() && (timer == nil || next.Before(timerAt)) {
			if cancelTimer != nil {
				cancelTimer()
			}
			var tctx workflow.Context
			tctx, cancelTimer = workflow.WithCancel(ctx)
			timer, timerAt = workflow.NewTimer(tctx, max(next.Sub(now), time.Millisecond)), next
		}
		m.changed = false
		armed := timer
		if err := workflow.Await(ctx, func() bool {
			return m.changed || (armed != nil && armed.IsReady()) || (m.signalsInLoop && m.signalled())
		}); err != nil {
			return err
		}
		if armed != nil && armed.IsReady() {
			timer, cancelTimer = nil, nil
		}
	}
}

func (m *mutex) register(ctx workflow.Context) error {
	handlers := []struct {
		name string
		fn   any
	}{
		{updAcquire, func(ctx workflow.Context, r acquireReq) (reply, error) { return m.acquire(ctx, r, true), nil }},
		{updWait, m.wait},
		{updExtend, func(ctx workflow.Context, r extendReq) (reply, error) { return m.extend(ctx, r), nil }},
		{updRelease, func(ctx workflow.Context, r ownerReq) (reply, error) { return m.release(ctx, r.Owner), nil }},
		{updBreak, func(ctx workflow.Context) (reply, error) { return m.breakLock(ctx), nil }},
	}
	for _, h := range handlers {
		if err := workflow.SetUpdateHandler(ctx, h.name, h.fn); err != nil {
			return err
		}
	}
	if err := workflow.SetQueryHandler(ctx, qryPlace, func(owner string) (reply, error) { return m.place(ctx, owner), nil }); err != nil {
		return err
	}
	return workflow.SetQueryHandler(ctx, qryState, func() (mutexState, error) { return m.s, nil })
}

// place answers a waiter's "place" query as a "wait" would be answered at
// once, but changes nothing (a query cannot): granted (the waiter then
// sends a wait, which takes the grant), queued with a RetryAfter (not yet),
// queued without (send a wait now), or gone.
func (m *mutex) place(ctx workflow.Context, owner string) reply {
	if m.holding(owner) != nil {
		return reply{Status: stGranted}
	}
	i := m.queued(owner)
	if i < 0 {
		return reply{Status: stGone}
	}
	return m.queuedReply(workflow.Now(ctx), true, i, m.s.Queue[i].TTL)
}

// receiveSignals serves the workflow-side API's signals in a coroutine of
// their own, as runs started before signalsVersion did.
func (m *mutex) receiveSignals(ctx workflow.Context) {
	acq, ext, rel := m.signals[0], m.signals[1], m.signals[2]
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(acq, func(c workflow.ReceiveChannel, _ bool) { m.onAcquireSignal(ctx, c) })
			sel.AddReceive(ext, func(c workflow.ReceiveChannel, _ bool) { m.onExtendSignal(ctx, c) })
			sel.AddReceive(rel, func(c workflow.ReceiveChannel, _ bool) { m.onReleaseSignal(ctx, c) })
			sel.Select(ctx)
		}
	})
}

// signalled reports whether a signal waits to be received.
func (m *mutex) signalled() bool {
	for _, c := range m.signals {
		if c.Len() > 0 {
			return true
		}
	}
	return false
}

// drainSignals handles the signals that arrived but were not yet
// received: every pass of the main loop (signalsVersion), and before the
// run continues as new, so that none is lost. Acquires go first, in
// arrival order, so that the queue keeps the order of the requests; then
// renewals, then releases: a workflow's release sent after its acquire
// finds the acquire done.
func (m *mutex) drainSignals(ctx workflow.Context) {
	for i, fn := range []func(workflow.Context, workflow.ReceiveChannel){m.onAcquireSignal, m.onExtendSignal, m.onReleaseSignal} {
		for m.signals[i].Len() > 0 {
			fn(ctx, m.signals[i])
		}
	}
}

func (m *mutex) onAcquireSignal(ctx workflow.Context, c workflow.ReceiveChannel) {
	var r acquireReq
	c.Receive(ctx, &r)
	r.Wait = true
	if r.ReplyTo == nil {
		// A client waiter that queues by signal (see queueBySignal): it
		// learns its place by query and takes a grant with a "wait".
		// Runs that did not know this ignored such a signal, and the
		// waiter, finding itself not queued, asked by update instead.
		maxVersion := workflow.Version(1)
		if playOlder.Load() {
			maxVersion = workflow.DefaultVersion
		}
		if workflow.GetVersion(ctx, queueBySignalVersion, workflow.DefaultVersion, maxVersion) >= 1 {
			r.Poll = true
			m.acquire(ctx, r, false)
		}
		return
	}
	if rep := m.acquire(ctx, r, true); rep.Status == stGranted {
		m.notify(ctx, *r.ReplyTo, sigGrantPrefix+r.Owner, grantMsg{Token: rep.Token, Recovered: rep.Recovered})
	}
}

func (m *mutex) onExtendSignal(ctx workflow.Context, c workflow.ReceiveChannel) {
	var r extendReq
	c.Receive(ctx, &r)
	// A renewal that comes too late needs no answer: the holder was sent
	// the lost signal when its lease ended.
	m.extend(ctx, r)
}

func (m *mutex) onReleaseSignal(ctx workflow.Context, c workflow.ReceiveChannel) {
	var r ownerReq
	c.Receive(ctx, &r)
	m.release(ctx, r.Owner)
}

// acquire serves r; replied says whether the reply reaches the requester
// (an update), so that a grant in it is picked up.
func (m *mutex) acquire(ctx workflow.Context, r acquireReq, replied bool) reply {
	now := workflow.Now(ctx)
	m.expire(ctx, now) // a lease past its end must not make a TryLock fail
	if h := m.holding(r.Owner); h != nil {
		if replied {
			m.pickUp(now)
		}
		return reply{Status: stGranted, Token: h.Token, Age: now.Sub(h.GrantedAt), Waiting: m.waiting()}
	}
	if i := m.queued(r.Owner); i >= 0 {
		m.s.Queue[i].Expires = now.Add(r.TTL)
		return m.queuedReply(now, r.Poll, i, r.TTL)
	}
	e := entry{Owner: r.Owner, TTL: r.TTL, Holder: r.Holder, ReplyTo: r.ReplyTo}
	if len(m.s.Queue) == 0 && m.admits(ctx, e) {
		tok := m.grant(now, e)
		if replied {
			m.pickUp(now) // the reply tells it
		}
		return reply{Status: stGranted, Token: tok, Recovered: m.s.Recovered, Waiting: m.waiting()}
	}
	if !r.Wait {
		return reply{Status: stBusy}
	}
	if e.ReplyTo == nil || m.probing {
		e.Expires = now.Add(r.TTL)
	}
	m.s.Queue = append(m.s.Queue, e)
	m.changed = true
	return m.queuedReply(now, r.Poll && e.ReplyTo == nil, len(m.s.Queue)-1, r.TTL)
}

// queuedReply tells the client waiter at queue position i that it is
// queued, and, if it polls (see ownerReq) and is too far back to hold a
// wait open, when to ask again.
func (m *mutex) queuedReply(now time.Time, poll bool, i int, ttl time.Duration) reply {
	if ahead := m.clientsAhead(i); poll && ahead >= longPolls {
		return reply{Status: stQueued, RetryAfter: m.pollAfter(now, ahead, ttl), Query: ahead >= queryFrom, Waiting: m.waiting()}
	}
	return reply{Status: stQueued, Waiting: m.waiting()}
}

// waitSlice bounds one wait: a waiter asks again after it, which both
// proves it is still there and keeps no update open for long. A third of
// the TTL, between 1s and 20s, but never more than half the TTL: the
// waiter's place lasts one TTL from the start of its last request, and it
// must be back before that (with a 1s TTL a 1s slice had the place expire
// as the wait ended, and the waiter queue again at the back).
func waitSlice(ttl time.Duration) time.Duration {
	return min(max(ttl/3, time.Second), 20*time.Second, ttl/2)
}

// wait returns when r.Owner is granted the lock, leaves the queue, or after
// a slice of its TTL (status queued: ask again).
func (m *mutex) wait(ctx workflow.Context, r ownerReq) (reply, error) {
	started := workflow.Now(ctx)
	i := m.queued(r.Owner)
	if i >= 0 {
		m.s.Queue[i].Expires = workflow.Now(ctx).Add(m.s.Queue[i].TTL)
		m.changed = true
		if rep := m.queuedReply(started, r.Poll, i, m.s.Queue[i].TTL); rep.RetryAfter > 0 {
			return rep, nil
		}
		if !m.draining {
			slice := waitSlice(m.s.Queue[i].TTL)
			m.listening[r.Owner]++
			_, err := workflow.AwaitWithTimeout(ctx, slice, func() bool {
				return m.draining || m.queued(r.Owner) < 0
			})
			if m.listening[r.Owner]--; m.listening[r.Owner] <= 0 {
				delete(m.listening, r.Owner)
			}
			if err != nil {
				return reply{}, err
			}
		}
	}
	now := workflow.Now(ctx)
	if h := m.holding(r.Owner); h != nil {
		m.pickUp(now)
		return reply{Status: stGranted, Token: h.Token, Recovered: m.s.Recovered, Age: now.Sub(h.GrantedAt), Waited: now.Sub(started), Waiting: m.waiting()}, nil
	}
	if i := m.queued(r.Owner); i >= 0 {
		m.s.Queue[i].Expires = now.Add(m.s.Queue[i].TTL)
		return reply{Status: stQueued, Waiting: m.waiting()}, nil
	}
	return reply{Status: stGone}, nil
}

func (m *mutex) extend(ctx workflow.Context, r extendReq) reply {
	h := m.holding(r.Owner)
	now := workflow.Now(ctx)
	if h == nil || h.Token != r.Token || !now.Before(h.Expires) {
		return reply{Status: stLost}
	}
	h.Expires = now.Add(r.TTL)
	h.TTL = r.TTL
	m.changed = true
	return reply{Status: stOK, Token: h.Token}
}

func (m *mutex) release(ctx workflow.Context, owner string) reply {
	if h := m.holding(owner); h != nil {
		m.s.Recovered = false
		m.end(ctx, h.Token, false)
		m.grantNext(ctx)
		return reply{Status: stOK}
	}
	if i := m.queued(owner); i >= 0 {
		m.leave(ctx, i)
		return reply{Status: stOK}
	}
	return reply{Status: stLost}
}

// leave removes the waiter at queue position i. Waiters behind it may
// hold now: one that asked with a higher limit than it (see admits).
func (m *mutex) leave(ctx workflow.Context, i int) {
	m.s.Queue = append(m.s.Queue[:i], m.s.Queue[i+1:]...)
	m.changed = true
	m.grantNext(ctx)
}

// breakLock ends every lease of the name, then grants it to the waiters
// that hold next.
func (m *mutex) breakLock(ctx workflow.Context) reply {
	if m.s.Holder == nil {
		return reply{Status: stFree}
	}
	for m.s.Holder != nil {
		m.end(ctx, m.s.Holder.Token, true)
	}
	m.grantNext(ctx)
	return reply{Status: stOK}
}

// end takes the lease with the given token from its holder (released, or
// lost when lost is true); the caller then grants it on (grantNext).
func (m *mutex) end(ctx workflow.Context, token uint64, lost bool) {
	var h entry
	switch {
	case m.s.Holder != nil && m.s.Holder.Token == token:
		h = *m.s.Holder
		m.s.Holder = nil
		if len(m.s.More) > 0 {
			next := m.s.More[0]
			m.s.Holder, m.s.More = &next, m.s.More[1:]
		}
	default:
		i := slices.IndexFunc(m.s.More, func(e entry) bool { return e.Token == token })
		if i < 0 {
			return
		}
		h = m.s.More[i]
		m.s.More = slices.Delete(m.s.More, i, i+1)
	}
	if len(m.s.More) == 0 {
		m.s.More = nil // as a state with one holder always was
	}
	if lost {
		m.s.Recovered = true
		if h.ReplyTo != nil {
			m.notify(ctx, *h.ReplyTo, sigLostPrefix+h.Owner, grantMsg{Token: h.Token})
		}
	}
	m.changed = true
}

// expire ends a lease whose time is up, drops client waiters that stopped
// asking, and probes workflow waiters whose time has come.
func (m *mutex) expire(ctx workflow.Context, now time.Time) {
	q := m.s.Queue[:0]
	for _, e := range m.s.Queue {
		switch {
		case e.ReplyTo == nil && !now.Before(e.Expires): // dropped
			continue
		case e.ReplyTo != nil && m.probing && !e.Expires.IsZero() && !now.Before(e.Expires):
			m.probeWaiter(ctx, e)
			e.Expires = now.Add(e.TTL)
		}
		q = append(q, e)
	}
	m.s.Queue = q
	for _, h := range m.holders() {
		if !now.Before(h.Expires) {
			m.end(ctx, h.Token, true)
		}
	}
	m.grantNext(ctx)
}

// holders returns a copy of the holders, in grant order.
func (m *mutex) holders() []entry {
	if m.s.Holder == nil {
		return nil
	}
	return append([]entry{*m.s.Holder}, m.s.More...)
}

// holding returns owner's lease if it holds one, to read or renew.
func (m *mutex) holding(owner string) *entry {
	if h := m.s.Holder; h != nil && h.Owner == owner {
		return h
	}
	for i := range m.s.More {
		if m.s.More[i].Owner == owner {
			return &m.s.More[i]
		}
	}
	return nil
}

// counted reports whether e asks for a lease that may be held beside
// others: a semaphore's permit or a reader's.
func counted(e entry) bool {
	return driver.HolderLimit(e.Holder) > 1 || driver.HolderShared(e.Holder)
}

// admits reports whether e, placed right behind the holders, holds: the
// rule of driver.QueueHolders, which etcdlock and zklock apply to their
// queues, applied to the queue Holder, More..., e. A mutex's request
// holds only when there is no holder, as it always did; a counted one
// (counted) beside holders only once countedVersion is on (see there).
func (m *mutex) admits(ctx workflow.Context, e entry) bool {
	hs := m.holders()
	if len(hs) == 0 {
		return true
	}
	if !counted(e) {
		return false // QueueHolders agrees: it is not ahead of a holder
	}
	if workflow.GetVersion(ctx, countedVersion, workflow.DefaultVersion, 1) < 1 {
		return false
	}
	n, _ := driver.QueueHolders(len(hs)+1, func(i int) ([]byte, error) {
		if i < len(hs) {
			return hs[i].Holder, nil
		}
		return e.Holder, nil
	})
	return n > len(hs)
}

// grantNext grants the name to the waiters at the head of the queue that
// hold now (admits), in queue order.
func (m *mutex) grantNext(ctx workflow.Context) {
	for len(m.s.Queue) > 0 && m.admits(ctx, m.s.Queue[0]) {
		e := m.s.Queue[0]
		m.s.Queue = m.s.Queue[1:]
		tok := m.grant(workflow.Now(ctx), e)
		if e.ReplyTo != nil {
			m.notify(ctx, *e.ReplyTo, sigGrantPrefix+e.Owner, grantMsg{Token: tok, Recovered: m.s.Recovered})
		}
	}
	m.settle()
}

// settle leaves out of the turnover the time the name is free: a grant
// that ends it measures no turnover. Without it, the first grant after a
// lock sat free for 4s counted a turnover of 4s into the average, and the
// waiters that queued behind it polled a wait slice late, each in turn:
// rounds of 8 processes that made about 57 grants in 2s back to back made
// 6 to 13 with 4s pauses between them (a throwaway test, one run each).
func (m *mutex) settle() {
	if m.s.Holder == nil {
		m.pickedUp = time.Time{}
	}
}

// grant makes e a holder, with the next token, which it returns.
func (m *mutex) grant(now time.Time, e entry) uint64 {
	if !m.pickedUp.IsZero() {
		t := now.Sub(m.pickedUp)
		if m.turnover > 0 {
			t = (3*m.turnover + t) / 4
		}
		m.turnover = t
	}
	m.pickedUp = time.Time{}
	if e.ReplyTo != nil || m.listening[e.Owner] > 0 {
		m.pickedUp = now
	}
	m.s.Token++
	e.Token, e.GrantedAt, e.Expires = m.s.Token, now, now.Add(e.TTL)
	if m.s.Holder == nil {
		m.s.Holder = &e
	} else {
		m.s.More = append(m.s.More, e)
	}
	m.changed = true
	return e.Token
}

// notify signals a lock-holding workflow. If it is gone (completed or
// terminated), a grant it cannot take is released at once rather than
// left to expire.
func (m *mutex) notify(ctx workflow.Context, to caller, signal string, msg grantMsg) {
	f := workflow.SignalExternalWorkflow(ctx, to.WorkflowID, to.RunID, signal, msg)
	workflow.Go(ctx, func(ctx workflow.Context) {
		if err := f.Get(ctx, nil); err != nil {
			for _, h := range m.holders() {
				if h.ReplyTo != nil && *h.ReplyTo == to && h.Token == msg.Token {
					m.end(ctx, h.Token, true)
					m.grantNext(ctx)
				}
			}
		}
	})
}

// probeWaiter checks that a workflow waiter still runs, once a TTL while
// it waits, by signalling it: a signal to a workflow run that has closed
// (completed, failed, timed out, terminated) fails, and the waiter leaves
// the queue then. A client waiter proves it is there by asking again; a
// workflow cannot be asked to, because a workflow waits durably — it may
// sit without a worker for a while and go on waiting when one is back, and
// must not lose its place for that. What makes its place stale is only
// that the run that asked has closed, and that is what the probe detects.
func (m *mutex) probeWaiter(ctx workflow.Context, e entry) {
	f := workflow.SignalExternalWorkflow(ctx, e.ReplyTo.WorkflowID, e.ReplyTo.RunID, sigQueuedPrefix+e.Owner, grantMsg{})
	workflow.Go(ctx, func(ctx workflow.Context) {
		if f.Get(ctx, nil) == nil {
			return
		}
		if i := m.queued(e.Owner); i >= 0 {
			m.leave(ctx, i)
		}
	})
}

// pickUp notes that the holder learned of its grant now, unless it had
// already.
func (m *mutex) pickUp(now time.Time) {
	if m.pickedUp.IsZero() {
		m.pickedUp = now
	}
}

// waiting counts the client waiters queued.
func (m *mutex) waiting() int {
	return m.clientsAhead(len(m.s.Queue))
}

// clientsAhead counts the client waiters (those that wait by update) in
// front of queue position i.
func (m *mutex) clientsAhead(i int) int {
	n := 0
	for _, e := range m.s.Queue[:i] {
		if e.ReplyTo == nil {
			n++
		}
	}
	return n
}

func (m *mutex) queued(owner string) int {
	for i, e := range m.s.Queue {
		if e.Owner == owner {
			return i
		}
	}
	return -1
}

func (m *mutex) nextDeadline() time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, h := range m.holders() {
		consider(h.Expires)
	}
	for _, e := range m.s.Queue {
		if e.ReplyTo == nil || m.probing {
			consider(e.Expires)
		}
	}
	return next
}

func (m *mutex) shouldContinueAsNew(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	limit := m.s.HistoryLimit
	if limit <= 0 {
		limit = defaultHistoryLimit
	}
	return info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() >= limit
}
