package driver

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is a retry schedule: the pause before retry n (counting from 0)
// is Base·2ⁿ, at most Cap, of which a random share of up to Jitter is taken
// off so that clients that failed together do not retry in lockstep. Reset
// the count when an attempt succeeds.
//
// A backend uses it for every pause between attempts that failed or found
// nothing yet: reconnecting a notification channel, retrying a request
// while the connection is down, polling a lock when no notification comes.
type Backoff struct {
	Base time.Duration // the first pause
	Cap  time.Duration // the longest pause; Base if smaller than Base
	// Jitter is the share of each pause that is random, from 0 (the pause
	// is exact) to 1 (anywhere in [0, pause]). 0.5, as Jitter's, spreads
	// a pause of d over [d/2, d].
	Jitter float64
}

// Delay returns the pause before retry n (0 for the first).
func (b Backoff) Delay(n int) time.Duration {
	d := max(b.Base, 0)
	for i := 0; i < n && d > 0 && d < b.Cap; i++ {
		if d > b.Cap/2 {
			d = b.Cap
		} else {
			d *= 2
		}
	}
	return spread(d, b.Jitter)
}

// Wait pauses for Delay(n), or until ctx ends, in which case it returns
// ctx's error.
func (b Backoff) Wait(ctx context.Context, n int) error {
	t := time.NewTimer(b.Delay(n))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Jitter returns a duration uniformly spread over [d/2, d], so that waiters
// that poll do not do so in lockstep.
func Jitter(d time.Duration) time.Duration { return spread(d, 0.5) }

// LookAgain is how long a waiter that was not granted waits for a wake-up
// message before it tries again: its heartbeat, jittered, or, when the
// lease in its way runs out sooner (expires says one does, in left), until
// just after that, not jittered, since an expiry sends no message. A left
// of 0 or below is a lease that runs out now: a backend's remaining time
// rounds down, or was read a moment after the server decided it was live.
// (Jittering that wait, which only shortens it, would have every look land
// before the expiry, nearer each time, until one reads it as 0.)
func LookAgain(heartbeat, left time.Duration, expires bool) time.Duration {
	if expires && left < heartbeat {
		return max(left, 0) + time.Millisecond
	}
	return Jitter(heartbeat)
}

// spread takes a random share of up to frac off d.
func spread(d time.Duration, frac float64) time.Duration {
	frac = min(max(frac, 0), 1)
	off := time.Duration(float64(d) * frac)
	if off <= 0 {
		return d
	}
	return d - rand.N(off+1)
}
