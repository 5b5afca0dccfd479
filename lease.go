package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock/dlock/driver"
)

// Lease is one grant of a lock: held until Unlock, renewed in the
// background, and possibly lost before that. Its methods are safe for
// concurrent use.
type Lease struct {
	c        *Client
	o        options
	name     string
	owner    string
	token    uint64
	handle   any
	ttl      time.Duration
	acquired time.Time

	ctx    context.Context // ends when the lease ends; its cause is Err
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time // monotonic: after it, holding can no longer be proven
	released bool      // Unlock was called
	ended    bool      // Done is closed or closing
	stop     chan struct{}
}

// Drift bounds the rate difference between this client's clock and the
// backend's that the loss deadline allows for: 1% of the TTL, plus a few
// milliseconds for the time the loss takes to be acted upon.
func driftMargin(ttl time.Duration) time.Duration {
	return ttl/100 + 5*time.Millisecond
}

func newLease(c *Client, o options, req driver.Request, g driver.Grant) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Lease{
		c: c, o: o, name: req.Name, owner: req.Owner, token: g.Token, handle: g.Handle,
		ttl: g.TTL, acquired: g.Since, ctx: ctx, cancel: cancel,
		deadline: g.Since.Add(g.TTL - driftMargin(g.TTL)),
		stop:     make(chan struct{}),
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
	return l.deadline
}

// Done returns a channel that is closed when the lease ends: when it is lost
// (Err wraps ErrLeaseLost) or released (Err is ErrNotHeld).
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Err returns nil while the lease is held; after it ended, an error wrapping
// ErrLeaseLost if it was lost, or ErrNotHeld if it was released.
func (l *Lease) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Unlock releases the lock and stops renewing it. It returns an error
// wrapping ErrLeaseLost if the lease had already been lost (another owner
// may hold the lock: it is never freed by this call), and ErrNotHeld if it
// was already released. If the backend cannot be reached, the lease stops
// being renewed and the lock frees itself when the TTL runs out.
func (l *Lease) Unlock(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return fmt.Errorf("%w: %q was already released", ErrNotHeld, l.name)
	}
	l.released = true
	close(l.stop)
	l.mu.Unlock()
	defer l.c.untrack(l)

	if err := l.Err(); err != nil { // lost before Unlock
		// The backend may still hold our entry (the client gave up first,
		// by design): free it now rather than at its TTL. The release is
		// owner-checked, so it can never free another owner's lock.
		_ = l.c.d.Release(ctx, l.held())
		return err
	}
	err := l.c.d.Release(ctx, l.held())
	if errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotHeld) {
		err = l.lose(fmt.Errorf("%w: %q was no longer ours at release: %w", ErrLeaseLost, l.name, err))
		return err
	}
	l.end(fmt.Errorf("%w: %q was released", ErrNotHeld, l.name))
	if h := l.o.hooks.Released; h != nil {
		h(l.name, l.token, time.Since(l.acquired))
	}
	if err != nil {
		return classify(ctx, err)
	}
	l.o.logger.Debug("dlock: released", "name", l.name, "token", l.token)
	return nil
}

func (l *Lease) held() driver.Held {
	return driver.Held{Name: l.name, Owner: l.owner, Token: l.token, Handle: l.handle}
}

// end closes Done with cause, once; it reports whether this call ended it.
func (l *Lease) end(cause error) bool {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return false
	}
	l.ended = true
	l.mu.Unlock()
	if errors.Is(cause, ErrLeaseLost) {
		// Tell the logger and hooks before Done closes, so whoever waits on
		// Done sees the hooks' effects.
		l.o.logger.Warn("dlock: lease lost", "name", l.name, "token", l.token, "cause", cause)
		if h := l.o.hooks.Lost; h != nil {
			h(l.name, l.token, cause)
		}
	}
	l.cancel(cause)
	return true
}

// lose ends the lease as lost; cause wraps ErrLeaseLost.
func (l *Lease) lose(cause error) error {
	l.end(cause)
	return l.Err()
}

// sleep waits d while the lease is renewed (the lock-delay); it fails if ctx
// ends or the lease is lost meanwhile.
func (l *Lease) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
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

// renewLoop extends the lease about every TTL/3 and declares it lost when
// the backend says so (ErrLeaseLost or the backend's lost channel) or when
// the deadline — the send time of the last confirmed renewal plus TTL minus
// the drift margin — passes without a newer confirmation.
func (l *Lease) renewLoop(backendLost <-chan struct{}) {
	every := l.ttl / 3
	type result struct {
		sent time.Time
		err  error
	}
	results := make(chan result, 1)
	inFlight := false
	// Renew TTL/3 after the grant's TTL began (a queued grant's may have
	// begun a while ago), then TTL/3 after each confirmed renewal.
	renew := time.NewTimer(max(time.Until(l.acquired.Add(every)), 0))
	defer renew.Stop()
	l.mu.Lock()
	expire := time.NewTimer(time.Until(l.deadline))
	l.mu.Unlock()
	defer expire.Stop()
	failures := 0

	for {
		select {
		case <-l.stop:
			return
		case <-backendLost:
			l.lose(fmt.Errorf("%w: %q: the backend reports the lease gone", ErrLeaseLost, l.name))
			return
		case <-expire.C:
			l.lose(fmt.Errorf("%w: %q: no renewal confirmed within the TTL (%v)", ErrLeaseLost, l.name, l.ttl))
			return
		case <-renew.C:
			if inFlight {
				continue
			}
			inFlight = true
			l.mu.Lock()
			deadline := l.deadline
			l.mu.Unlock()
			go func() {
				// A renewal that arrives after the deadline proves nothing.
				ctx, cancel := context.WithDeadline(context.Background(), deadline)
				defer cancel()
				sent := time.Now()
				err := l.c.d.Extend(ctx, l.held(), l.ttl)
				results <- result{sent, err}
			}()
		case r := <-results:
			inFlight = false
			switch {
			case r.err == nil:
				failures = 0
				newDeadline := r.sent.Add(l.ttl - driftMargin(l.ttl))
				l.mu.Lock()
				if newDeadline.After(l.deadline) {
					l.deadline = newDeadline
				}
				deadline := l.deadline
				l.mu.Unlock()
				expire.Reset(time.Until(deadline))
				renew.Reset(time.Until(r.sent.Add(every)))
			case errors.Is(r.err, ErrLeaseLost) || errors.Is(r.err, ErrNotHeld):
				l.lose(fmt.Errorf("%w: %q: renewal refused: %w", ErrLeaseLost, l.name, r.err))
				return
			default:
				// The backend is unreachable or failing: retry sooner, with
				// back-off, until the deadline decides.
				failures++
				l.o.logger.Warn("dlock: renewal failed", "name", l.name, "token", l.token, "attempt", failures, "err", r.err)
				l.mu.Lock()
				left := time.Until(l.deadline)
				l.mu.Unlock()
				retry := min(every/4<<min(failures-1, 3), left/3)
				renew.Reset(driver.Jitter(max(retry, 5*time.Millisecond)))
			}
		}
	}
}
