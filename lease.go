package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dlock/dlock/driver"
)

// Lease is one grant of a lock: held until Unlock, renewed in the
// background, and possibly lost before that. Its methods are safe for
// concurrent use.
type Lease struct {
	c        *Client
	hooks    *Hooks       // the lock call's: never nil
	logger   *slog.Logger // the lock call's
	name     string
	owner    string
	token    uint64
	handle   any
	ttl      time.Duration
	acquired time.Time

	over driver.Signal // fires when the lease ends, with Err as its cause

	mu sync.Mutex
	// The deadline, after which holding can no longer be proven, as a
	// time after acquired (on the monotonic clock): a lease's times are
	// kept as offsets, which keeps a held lease small.
	deadline  time.Duration
	unlocked  bool // Unlock was called: renewal has stopped for good
	releasing bool // an Unlock's release is in flight
	ended     bool // Done is closed or closing
	// unanswered: the last request for this lease (a renewal or the
	// release) got no answer: a loss at the deadline is then the
	// backend's unreachability, not the holder's lateness.
	unanswered bool
	// renewing: a renewal sent before the deadline is in flight; still
	// unanswered at the deadline, it is unreachability too, even if the
	// backend's client has not given it up yet.
	renewing bool
	// expiring: the deadline is watched (from the first renewal on).
	expiring bool
	failures int32 // renewals failed in a row
	// lostWhileReleasing is a loss reported while a release was in flight;
	// it ends the lease if that release fails.
	lostWhileReleasing error

	// renewAt is when the next renewal is due, as a time after acquired
	// (0: none, as while one is in flight or after Unlock). alarm is the
	// lease's entry in its client's scheduler, set for the next of its
	// events (the renewal or the deadline).
	renewAt time.Duration
	alarm   driver.Alarm

	stopWatch func() bool // unregisters the wait for the backend's loss signal
}

// Drift bounds the rate difference between this client's clock and the
// backend's that the loss deadline allows for: 1% of the TTL, plus a few
// milliseconds for the time the loss takes to be acted upon.
func driftMargin(ttl time.Duration) time.Duration {
	return ttl/100 + 5*time.Millisecond
}

func newLease(c *Client, o options, req driver.Request, g driver.Grant) *Lease {
	return &Lease{
		c: c, hooks: o.hooks, logger: o.logger, name: req.Name, owner: req.Owner, token: g.Token, handle: g.Handle,
		ttl: g.TTL, acquired: g.Since,
		deadline: g.TTL - driftMargin(g.TTL),
	}
}

// Name returns the lock's name.
func (l *Lease) Name() string { return l.name }

// Token returns the fencing token: strictly greater than the token of every
// earlier grant of this lock. Send it with every write to the protected
// resource, and have the resource refuse writes whose token is lower than
// the highest it has accepted.
func (l *Lease) Token() uint64 { return l.token }

// TTL returns the lease length the backend granted.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Expires returns the time until which this client can prove it holds the
// lock: the send time of the last confirmed renewal plus the TTL, minus a
// drift margin. It moves forward with each renewal.
func (l *Lease) Expires() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadlineTime()
}

// deadlineTime is the deadline as a time. l.mu is held.
func (l *Lease) deadlineTime() time.Time { return l.acquired.Add(l.deadline) }

// after is t as a time after acquired, for deadline and renewAt: at
// least 1ns, since a renewAt of 0 means none.
func (l *Lease) after(t time.Time) time.Duration { return max(t.Sub(l.acquired), 1) }

// Done returns a channel that is closed when the lease ends: when it is lost
// (Err wraps ErrLeaseLost) or released (Err is ErrNotHeld).
func (l *Lease) Done() <-chan struct{} { return l.over.Done() }

// Err returns nil while the lease is held; after it ended, an error wrapping
// ErrLeaseLost if it was lost, or ErrNotHeld if it was released.
func (l *Lease) Err() error { return l.over.Cause() }

// Unlock releases the lock and stops renewing it. It returns an error
// wrapping ErrLeaseLost if the lease had already been lost (another owner
// may hold the lock: it is never freed by this call), and ErrNotHeld if
// Unlock was already called and ended the lease.
//
// If ctx has already ended (as in defer l.Unlock(requestCtx)), Unlock
// still makes the release, within driver.CleanupTimeout of its own.
//
// If the release fails (the backend cannot be reached, or ctx ends while
// it is in flight), Unlock returns that error, wrapping ErrUnavailable or
// ctx's error, and reports no release: the Released hook does not run and
// Err stays nil. The lease is then no longer renewed but still held until
// its deadline (Expires): there Done closes, with Err wrapping
// ErrLeaseLost, and the backend frees the lock when the TTL it counts runs
// out. Calling Unlock again before that retries the release, and so does
// Client.Close.
func (l *Lease) Unlock(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: Unlock: nil context", ErrInvalidOption)
	}
	l.mu.Lock()
	switch {
	case l.releasing:
		l.mu.Unlock()
		return fmt.Errorf("%w: %q is being released by another Unlock", ErrNotHeld, l.name)
	case l.unlocked && l.ended:
		l.mu.Unlock()
		if errors.Is(l.Err(), ErrLeaseLost) {
			return fmt.Errorf("%w: %q: Unlock was already called, after the lease was lost", ErrNotHeld, l.name)
		}
		return fmt.Errorf("%w: %q was already released", ErrNotHeld, l.name)
	}
	l.unlocked, l.releasing = true, true
	// Stop renewing, but keep listening to the backend's loss signal until
	// the release's outcome is known (see lose).
	l.stopTimers()
	l.mu.Unlock()

	rctx, classifyCtx := ctx, ctx
	if ctx.Err() != nil {
		// The caller has given up waiting, not on the release: make it
		// anyway, within a bound of its own, rather than leave the lock
		// held for its TTL. Its failure is then the backend's.
		var cancel context.CancelFunc
		rctx, cancel = driver.CleanupContext(ctx)
		defer cancel()
		classifyCtx = context.WithoutCancel(ctx)
	}

	if err := l.Err(); err != nil { // lost before Unlock
		// The backend may still hold our entry (the client gave up first,
		// by design): free it now rather than at its TTL. The release is
		// owner-checked, so it can never free another owner's lock. It is
		// a clean-up whose outcome changes nothing reported: bound it even
		// when ctx has no deadline.
		cctx, cancel := context.WithTimeout(rctx, driver.CleanupTimeout)
		_ = l.c.d.Release(cctx, l.held())
		cancel()
		l.mu.Lock()
		l.releasing = false
		l.mu.Unlock()
		l.c.untrack(l)
		return err
	}
	err := l.c.d.Release(rctx, l.held())
	switch {
	case err == nil:
		l.end(releasedError{l.name})
		if h := l.hooks.Released; h != nil {
			h(l.name, l.token, driver.Since(l.acquired))
		}
		if l.logger.Enabled(ctx, slog.LevelDebug) {
			l.logger.Debug("dlock: released", "name", l.name, "token", l.token)
		}
		return nil
	case errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotHeld):
		l.end(lossOf(l.goneCause(err, driver.Now()), fmt.Errorf("%w: %q was no longer ours at release: %w", ErrLeaseLost, l.name, err)))
		return l.Err()
	}
	// The release failed: the lock is still ours on the backend until its
	// TTL runs out, and ours to use until the deadline, when the expiry
	// check ends the lease. Renewal stays stopped. The client keeps track
	// of the lease until it ends, so that Close retries the release.
	l.mu.Lock()
	l.releasing = false
	l.unanswered = true
	lost := l.lostWhileReleasing
	if lost == nil && !l.ended {
		l.expiring = true
		l.schedule()
	}
	l.mu.Unlock()
	if lost != nil {
		l.end(lost)
	}
	l.logger.Warn("dlock: release failed; the lock frees when its TTL runs out", "name", l.name, "token", l.token, "err", err)
	return classify(classifyCtx, err)
}

// abandon stops renewing a lease that Close had no time left to release,
// as a release that failed does: the lock stays held on the backend until
// its TTL runs out, and the lease ends at its deadline, as expired (no
// request for it went unanswered).
func (l *Lease) abandon() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unlocked || l.releasing || l.ended {
		return
	}
	l.unlocked = true
	l.stopTimers()
	l.expiring = true
	l.schedule()
}

func (l *Lease) held() driver.Held {
	return driver.Held{Name: l.name, Owner: l.owner, Token: l.token, Handle: l.handle}
}

// end closes Done with cause, once.
func (l *Lease) end(cause error) {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	l.ended = true
	unlocked := l.unlocked
	l.stopTimers()
	if l.stopWatch != nil {
		l.stopWatch()
	}
	l.mu.Unlock()
	// Close Done first: whoever must stop work on a loss learns it without
	// waiting for a slow logger or hook (nor for a hook that waits on Done).
	l.over.FireCause(cause)
	if unlocked {
		l.c.untrack(l) // a lease not unlocked yet stays tracked for Close
	}
	if errors.Is(cause, ErrLeaseLost) {
		l.logger.Warn("dlock: lease lost", "name", l.name, "token", l.token, "cause", cause)
		if h := l.hooks.Lost; h != nil {
			h(l.name, l.token, cause)
		}
	}
}

// lose ends the lease as lost; cause wraps ErrLeaseLost. While a release
// is in flight, the backend's signals (a watch seeing our own delete) are
// most likely that release, not a loss: the release's outcome decides, and
// the loss counts only if the release fails.
func (l *Lease) lose(cause error) {
	l.mu.Lock()
	if l.releasing {
		if l.lostWhileReleasing == nil {
			l.lostWhileReleasing = cause
		}
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.end(cause)
}

// sleep waits d while the lease is renewed (the lock-delay); it fails if ctx
// ends or the lease is lost meanwhile.
func (l *Lease) sleep(ctx context.Context, d time.Duration) error {
	t := driver.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-l.Done():
		return l.Err()
	}
}

// startRenewal schedules the first renewal; backendLost, if not nil, is
// the backend's own loss signal. Renewals and expiry checks are events of
// the client's scheduler rather than a goroutine or timers per lease: a
// held lease costs no goroutine and no wake-up until a renewal is due, and
// a few dozen bytes of the scheduler's, which keeps an uncontended
// Lock+Unlock close to the backend's round trips and many held locks cheap.
//
// The lease is declared lost when the backend says so (ErrLeaseLost, or
// backendLost closing) or when the deadline — the send time of the last
// confirmed renewal plus TTL minus the drift margin — passes without a newer
// confirmation, whether or not a renewal is still in flight. The deadline
// is watched from the first renewal on: until that is due, TTL/3 after the
// grant, the deadline is at least a third of the TTL further away, and a
// lease released before that (the common case) never needs it watched.
func (l *Lease) startRenewal(backendLost *driver.Signal) {
	l.mu.Lock()
	// Renew TTL/3 after the grant's TTL began (a queued grant's may have
	// begun a while ago), then TTL/3 after each confirmed renewal.
	if !l.unlocked && !l.ended {
		l.renewAt = l.ttl / 3
		l.schedule()
	}
	l.mu.Unlock()
	if backendLost != nil {
		stop := backendLost.AfterFire(func() {
			why := l.goneCause(backendLost.Cause(), driver.Now())
			l.lose(lossOf(why, fmt.Errorf("%w: %q: the backend reports the lease gone", ErrLeaseLost, l.name)))
		})
		l.mu.Lock()
		l.stopWatch = stop
		l.mu.Unlock()
	}
}

// stopTimers cancels the lease's renewal and expiry check; a renewal
// already running sees l.unlocked or l.ended and does nothing more. l.mu
// is held. With neither a renewal nor the deadline due, the lease is not
// in the scheduler (schedule, the only place that sets it there, follows
// every change of the two), and the scheduler's lock is not taken: an
// Unlock stops the timers, and the lease's end does so again.
func (l *Lease) stopTimers() {
	if l.renewAt == 0 && !l.expiring {
		return
	}
	l.renewAt, l.expiring = 0, false
	l.c.sched.Stop((*scheduled)(l))
}

// schedule tells the client's scheduler when the lease's next event is
// due: the next renewal, or the deadline if it is watched and comes
// first. l.mu is held.
func (l *Lease) schedule() {
	at := l.renewAt
	if l.expiring && (at == 0 || l.deadline < at) {
		at = l.deadline
	}
	if at == 0 {
		l.c.sched.Stop((*scheduled)(l))
		return
	}
	l.c.sched.Set((*scheduled)(l), l.acquired.Add(at))
}

// due runs when the scheduler finds the lease's next event due: past the
// deadline, the expiry check; else, a due renewal, on one of the client's
// renewers (a round trip: it must hold up neither the scheduler nor the
// other leases' events). Both end the lease's schedule until they set the
// next, but for the deadline, which is watched while a renewal waits.
func (l *Lease) due() {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	now := driver.Since(l.acquired)
	switch {
	case l.expiring && now >= l.deadline:
		// The loss runs hooks and a logger: not on the scheduler's time.
		l.renewAt, l.expiring = 0, false
		go l.expired()
	case l.renewAt != 0 && now >= l.renewAt:
		// The deadline is watched from here on, also while the renewal
		// waits for a renewer.
		l.renewAt, l.expiring = 0, true
		l.c.renewers.add(l)
	}
	l.schedule()
	l.mu.Unlock()
}

// expired runs when the deadline passes, unless a renewal moved it.
func (l *Lease) expired() {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	if driver.Until(l.deadlineTime()) > 0 {
		l.expiring = true // a renewal confirmed meanwhile
		l.schedule()
		l.mu.Unlock()
		return
	}
	why := LossExpired
	if l.unanswered || l.renewing {
		why = LossUnreachable
	}
	l.mu.Unlock()
	l.lose(lossOf(why, fmt.Errorf("%w: %q: no renewal confirmed within the TTL (%v)", ErrLeaseLost, l.name, l.ttl)))
}

// renew extends the lease once, on one of its client's renewers
// (renewals), and schedules the next renewal (or a retry).
func (l *Lease) renew() {
	sent, bound, ok := l.renewBegin()
	if !ok {
		return
	}
	ctx, cancel := driver.WithDeadline(context.Background(), bound)
	err := l.c.d.Extend(ctx, l.held(), l.ttl)
	cancel()
	l.renewEnd(sent, err)
}

// renewBegin marks a renewal in flight and returns when it is sent and the
// time it must be answered by; ok is false when there is nothing to renew
// (the lease was released or has ended, or its deadline passed before the
// renewal could be sent: then it is lost here).
func (l *Lease) renewBegin() (sent, bound time.Time, ok bool) {
	l.mu.Lock()
	if l.unlocked || l.ended {
		l.mu.Unlock()
		return sent, bound, false
	}
	deadline := l.deadlineTime()
	if !l.expiring {
		l.expiring = true
		l.schedule()
	}

	// A renewal that arrives after the deadline proves nothing. Each
	// attempt is also bounded by TTL/3, the renewal interval: a request
	// stuck on one server (a member cut from its cluster, a connection
	// that went silent) must not use up the whole lease when a retry,
	// possibly to a healthy server, would be answered.
	sent = driver.Now()
	if !sent.Before(deadline) {
		// The renewal came due after the deadline (the process was paused, or
		// starved): the lease ran out before a renewal could be sent.
		l.mu.Unlock()
		l.expired()
		return sent, bound, false
	}
	l.renewing = true
	l.mu.Unlock()
	return sent, minTime(deadline, sent.Add(l.ttl/3)), true
}

// renewEnd settles a renewal begun by renewBegin at sent, answered with err.
func (l *Lease) renewEnd(sent time.Time, err error) {
	if err != nil && (errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotHeld)) {
		l.lose(lossOf(l.goneCause(err, driver.Now()), fmt.Errorf("%w: %q: renewal refused: %w", ErrLeaseLost, l.name, err)))
		return
	}
	rtt := driver.Since(sent)
	l.mu.Lock()
	l.renewing = false
	if l.unlocked || l.ended {
		l.mu.Unlock()
		return
	}
	every := l.ttl / 3
	if err == nil {
		l.failures, l.unanswered = 0, false
		if d := l.after(sent.Add(l.ttl - driftMargin(l.ttl))); d > l.deadline {
			l.deadline = d
		}
		l.renewAt = l.after(sent.Add(every))
		l.schedule()
		l.mu.Unlock()
		if h := l.hooks.Renewed; h != nil {
			h(l.name, l.token, rtt)
		}
		return
	}
	// The backend is unreachable or failing: retry sooner, from TTL/12
	// backing off to 2·TTL/3, but within a third of the time left before
	// the deadline (and at least 5ms apart), until the deadline decides.
	l.failures++
	l.unanswered = true
	attempt := l.failures
	const floor = 5 * time.Millisecond
	retry := driver.Backoff{Base: max(every/4, floor), Cap: max(min(2*every, driver.Until(l.deadlineTime())/3), floor), Jitter: 0.5}
	l.renewAt = l.after(driver.Now().Add(retry.Delay(int(l.failures) - 1)))
	l.schedule()
	l.mu.Unlock()
	err = classify(context.Background(), err)
	l.logger.Warn("dlock: renewal failed", "name", l.name, "token", l.token, "attempt", attempt, "err", err)
	if h := l.hooks.RenewalFailed; h != nil {
		h(l.name, l.token, err)
	}
}

// Why a lease was lost, as LossCause reports it. The client tells them
// apart by what it saw, under the clock assumption of the package doc:
//
//   - LossBroken: the backend said the lease was gone while, by this
//     client's deadline, its TTL had not run out: someone removed it — a
//     Break, or an operator's delete; a backend that lost its data (a
//     Redis restarted without persistence) looks the same.
//   - LossExpired: the TTL ran out though no request for the lease was
//     left unanswered: the holder was late — a paused process or starved
//     timers, whose renewal was not even sent before the deadline (also
//     one that waited for a renewer while the client's renewals in
//     flight, 64 requests or 4 batches, were unanswered) — or the
//     backend said the lease was gone once the deadline had passed. A
//     lease that ran out on the server early (an operator shortened its
//     TTL) is seen as broken.
//   - LossSessionLost: the backend session the lease was tied to ended,
//     as the backend reported it (driver.ErrSessionLost): a ZooKeeper
//     session the server expired. PostgreSQL's session locks do not
//     report it, since their Break ends the holder's session too: such a
//     loss reads as broken (or, past the deadline, as expired or
//     unreachable).
//   - LossUnreachable: the deadline passed while a renewal sent before it
//     had no answer yet, or after the last renewal (or the release) had
//     failed: the backend could not be reached, or failed, or answered
//     too late.
const (
	LossExpired     = "expired"
	LossBroken      = "broken"
	LossSessionLost = "session_lost"
	LossUnreachable = "unreachable"
)

// LossCause tells why a lease was lost, from the error it ended with
// (Lease.Err, the cause given to Hooks.Lost, Unlock's or Do's error): one
// of LossExpired, LossBroken, LossSessionLost and LossUnreachable. It
// returns "" for an error that is not a lease loss.
func LossCause(err error) string {
	if le, ok := errors.AsType[*lossError](err); ok {
		return le.why
	}
	if errors.Is(err, driver.ErrSessionLost) {
		return LossSessionLost
	}
	return ""
}

// lossError is the cause of a lost lease's end: it wraps ErrLeaseLost,
// and says why.
type lossError struct {
	why string
	err error
}

func (e *lossError) Error() string { return e.err.Error() }
func (e *lossError) Unwrap() error { return e.err }

func lossOf(why string, err error) error { return &lossError{why, err} }

// goneCause classifies a loss the backend reported at time at, with err
// (nil if it said no more than "gone"): a session's end if it says so; a
// removal if this client's deadline had not passed, since the backend's
// own TTL could not have run out before it; past the deadline, the
// backend's unreachability if a request for the lease was left without an
// answer in time (the one refused now included), else an expiry.
func (l *Lease) goneCause(err error, at time.Time) string {
	if errors.Is(err, driver.ErrSessionLost) {
		return LossSessionLost
	}
	l.mu.Lock()
	deadline, unanswered := l.deadlineTime(), l.unanswered || l.renewing
	l.mu.Unlock()
	switch {
	case at.Before(deadline):
		return LossBroken
	case unanswered:
		return LossUnreachable
	}
	return LossExpired
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// releasedError is the cause of a released lease's end: ErrNotHeld, with
// the name, formatted only if someone asks.
type releasedError struct{ name string }

func (e releasedError) Error() string { return fmt.Sprintf("%v: %q was released", ErrNotHeld, e.name) }
func (e releasedError) Unwrap() error { return ErrNotHeld }
