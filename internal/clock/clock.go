package clock

import (
	"context"
	"sync/atomic"
	"time"
)

// skewed is a clock that runs at rate from base, shifted by offset.
type skewed struct {
	rate   float64
	offset time.Duration
	base   time.Time // the real reading when Skew was called
}

// skew is nil while the clock is package time's: the default path is one
// atomic load and a nil check.
var skew atomic.Pointer[skewed]

// Skew makes this process's clock run at rate times real time (0.5: half
// speed, the process believes that less time has passed than did; timers
// of d fire after d/rate of real time), with its readings shifted by
// offset. Call it at the start of the process, before any reading is
// taken: readings taken before and after a Skew are not comparable.
// Skew(1, 0) restores package time. It panics if rate is not positive.
func Skew(rate float64, offset time.Duration) {
	if !(rate > 0) {
		panic("clock.Skew: the rate must be positive")
	}
	if rate == 1 && offset == 0 {
		skew.Store(nil)
		return
	}
	skew.Store(&skewed{rate: rate, offset: offset, base: time.Now()})
}

// Skewed reports whether Skew is in effect.
func Skewed() bool { return skew.Load() != nil }

// Now returns the current time of this process's clock.
func Now() time.Time {
	if s := skew.Load(); s != nil {
		return s.now()
	}
	return time.Now()
}

// Since returns the time elapsed since t on this process's clock.
func Since(t time.Time) time.Duration {
	if s := skew.Load(); s != nil {
		return s.now().Sub(t)
	}
	return time.Since(t)
}

// Until returns the time until t on this process's clock.
func Until(t time.Time) time.Duration {
	if s := skew.Load(); s != nil {
		return t.Sub(s.now())
	}
	return time.Until(t)
}

// NewTimer is time.NewTimer with d of this process's clock. A timer made
// here is reset with Reset, not with its own Reset method.
func NewTimer(d time.Duration) *time.Timer { return time.NewTimer(realDuration(d)) }

// AfterFunc is time.AfterFunc with d of this process's clock. A timer made
// here is reset with Reset, not with its own Reset method.
func AfterFunc(d time.Duration, f func()) *time.Timer { return time.AfterFunc(realDuration(d), f) }

// Reset is t.Reset with d of this process's clock.
func Reset(t *time.Timer, d time.Duration) bool { return t.Reset(realDuration(d)) }

// WithDeadline is context.WithDeadline with d a reading of this process's
// clock: the context ends when this clock reaches d.
func WithDeadline(ctx context.Context, d time.Time) (context.Context, context.CancelFunc) {
	if skew.Load() == nil {
		return context.WithDeadline(ctx, d)
	}
	return context.WithTimeout(ctx, realDuration(Until(d)))
}

// realDuration converts d of this process's clock into real time.
func realDuration(d time.Duration) time.Duration {
	if s := skew.Load(); s != nil && d > 0 {
		return time.Duration(float64(d) / s.rate)
	}
	return d
}

func (s *skewed) now() time.Time {
	elapsed := time.Since(s.base) // monotonic
	return s.base.Add(s.offset + time.Duration(float64(elapsed)*s.rate))
}
