package driver

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Retrier is a backend whose engine has no queue: it can only try, and learn
// from a notification (or a timeout) that trying again may succeed. Redis,
// the SQL databases and Temporal's id mode are of this kind; they implement
// Driver.Acquire with AcquireByRetry.
type Retrier interface {
	// TryAcquire makes one attempt. When the lock is held it returns
	// ErrNotAcquired and, if known, how long the holder's lease has left
	// (retryAfter), which bounds the fallback poll.
	TryAcquire(ctx context.Context, req Request) (g Grant, retryAfter time.Duration, err error)
	// Release is used to give back a grant whose caller stopped waiting
	// while the attempt was in flight.
	Release(ctx context.Context, h Held) error
}

// Subscriber is implemented by a Retrier that can push a wake-up when a lock
// is released (pub/sub, LISTEN/NOTIFY, a server-side wait).
type Subscriber interface {
	// Subscribe starts listening for releases of name. The returned channel
	// receives a value (or is closed) after each release seen; stop ends the
	// subscription. AcquireByRetry subscribes before its first attempt, so a
	// release between an attempt and the wait is never missed.
	Subscribe(ctx context.Context, name string) (wake <-chan struct{}, stop func(), err error)
}

// Fallback polling. With a push wake-up the poll is only a safety net for
// a lost notification, so it is slow; without one it is the only way to
// learn of a release, so it starts fast and backs off. (The jitter is
// applied after the holder's remaining TTL has bounded the pause.)
const safetyPoll = 2 * time.Second

var pollNoPush = Backoff{Base: 2 * time.Millisecond, Cap: 250 * time.Millisecond}

// AcquireByRetry implements Driver.Acquire for a Retrier: one attempt when
// req.Wait is false, otherwise attempts woken by the backend's push
// notification (if it is a Subscriber) with a jittered fallback poll bounded
// by the holder's remaining TTL.
//
// Each attempt runs detached from ctx, so that its outcome is always known:
// if ctx ends while an attempt is in flight, AcquireByRetry waits for that
// attempt's answer (at most CleanupTimeout) and, if it was a grant,
// releases it (within CleanupTimeout) before returning ctx's error. So a
// process that exits as soon as a cancelled acquire returns leaves no lock
// behind. Only if the attempt has not answered within CleanupTimeout does
// AcquireByRetry return without it, leaving the release of a late grant to
// a goroutine; a process that exits then leaves that grant to its TTL.
//
// An attempt that runs out of its own time (max(TTL, 5s)) while ctx is
// live returns an error wrapping ErrUnavailable and the context error:
// the backend did not answer, the caller did not give up.
func AcquireByRetry(ctx context.Context, req Request, r Retrier) (Grant, error) {
	if !req.Wait {
		g, _, err := attempt(ctx, req, r)
		return g, err
	}
	var wake <-chan struct{}
	if s, ok := r.(Subscriber); ok {
		w, stop, err := s.Subscribe(ctx, req.Name)
		if err != nil {
			return Grant{}, err
		}
		defer stop()
		wake = w
	}
	for polls := 0; ; polls++ {
		g, retryAfter, err := attempt(ctx, req, r)
		if err == nil || !errors.Is(err, ErrNotAcquired) {
			return g, err
		}
		wait := safetyPoll
		if wake == nil {
			wait = pollNoPush.Delay(polls)
		}
		// If the holder's lease runs out before the next poll, look then,
		// because an expiry sends no notification.
		timer := time.NewTimer(LookAgain(wait, retryAfter, retryAfter > 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			return Grant{}, ctx.Err()
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// attempt runs one TryAcquire detached from ctx; see AcquireByRetry.
func attempt(ctx context.Context, req Request, r Retrier) (Grant, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return Grant{}, 0, err
	}
	type result struct {
		g   Grant
		ra  time.Duration
		err error
	}
	done := make(chan result, 1)
	detached := context.WithoutCancel(ctx)
	go func() {
		actx, cancel := context.WithTimeout(detached, attemptTimeout(req.TTL))
		defer cancel()
		sent := Now()
		g, ra, err := r.TryAcquire(actx, req)
		if err == nil && g.Since.IsZero() {
			g.Since = sent
		}
		done <- result{g, ra, err}
	}()
	giveBack := func(res result) {
		if res.err == nil {
			rctx, cancel := CleanupContext(ctx)
			defer cancel()
			_ = r.Release(rctx, Held{Name: req.Name, Owner: req.Owner, Token: res.g.Token, Handle: res.g.Handle})
		}
	}
	select {
	case res := <-done:
		// The attempt's own deadline, not the caller's, is the backend
		// not answering in time.
		return res.g, res.ra, Classify(ctx, fmt.Sprintf("one attempt of at most %v", attemptTimeout(req.TTL)), res.err)
	case <-ctx.Done():
	}
	// The caller gave up while the attempt was in flight: learn its outcome
	// and give back a grant before returning, so that nothing is left
	// behind even if the process exits next.
	wait := time.NewTimer(CleanupTimeout)
	defer wait.Stop()
	select {
	case res := <-done:
		giveBack(res)
	case <-wait.C:
		go func() { giveBack(<-done) }()
	}
	return Grant{}, 0, ctx.Err()
}

// attemptTimeout bounds one round of an acquire: a grant that took longer
// than its own TTL to arrive would be worthless anyway.
func attemptTimeout(ttl time.Duration) time.Duration {
	return max(ttl, 5*time.Second)
}

// CleanupTimeout bounds a clean-up made after the caller's context ended or
// on its behalf (giving back a grant, a release on Unlock with an ended
// context, on a panic, on Close): long enough for a slow but working
// backend, short enough that a hung one cannot hold the caller.
const CleanupTimeout = 5 * time.Second

// CleanupContext returns a context that keeps ctx's values but not its
// cancellation, and ends after CleanupTimeout: the context for a clean-up
// that must run even though ctx has ended, and must not run forever.
func CleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
}

// GiveBackIfEnded settles an acquire attempt that ran detached from ctx,
// so that its outcome is known: if it granted (err is nil) but ctx has
// ended meanwhile, the grant is given back by release, within
// CleanupTimeout, and ctx's error is returned in its place — otherwise the
// lock would stay held, unused, until its TTL ran out. Any other outcome
// is returned as it is.
func GiveBackIfEnded(ctx context.Context, g Grant, err error, release func(context.Context)) (Grant, error) {
	if err != nil || ctx.Err() == nil {
		return g, err
	}
	rctx, cancel := CleanupContext(ctx)
	defer cancel()
	release(rctx)
	return Grant{}, ctx.Err()
}
