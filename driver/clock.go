package driver

import (
	"context"
	"time"

	"github.com/dlock/dlock/internal/clock"
)

// The clock of lease decisions. Grant.Since, a backend's own lease or
// renewal deadline (a session node kept alive while queued, a renewal
// due at TTL/3) and the portable layer's loss deadline are all compared
// with one another, so they must be readings of one clock: these
// functions, never package time's. They are package time's unless dlock's
// verification harness skews this process's clock to test a client whose
// clock runs fast or slow; a reading of package time mixed with one of
// these would then be wrong by the skew.
//
// Timeouts that bound a network call and intervals of a back-off are
// real time and use package time as usual.

// Now returns the current time of the lease clock.
func Now() time.Time { return clock.Now() }

// Since returns the time elapsed since t, a reading of Now.
func Since(t time.Time) time.Duration { return clock.Since(t) }

// Until returns the time until t, a reading of Now.
func Until(t time.Time) time.Duration { return clock.Until(t) }

// NewTimer is time.NewTimer with d measured by the lease clock. Reset
// such a timer with ResetTimer, not with its own Reset method.
func NewTimer(d time.Duration) *time.Timer { return clock.NewTimer(d) }

// AfterFunc is time.AfterFunc with d measured by the lease clock. Reset
// such a timer with ResetTimer, not with its own Reset method.
func AfterFunc(d time.Duration, f func()) *time.Timer { return clock.AfterFunc(d, f) }

// ResetTimer is t.Reset with d measured by the lease clock.
func ResetTimer(t *time.Timer, d time.Duration) bool { return clock.Reset(t, d) }

// WithDeadline is context.WithDeadline with d a reading of Now: the
// context ends when the lease clock reaches d.
func WithDeadline(ctx context.Context, d time.Time) (context.Context, context.CancelFunc) {
	return clock.WithDeadline(ctx, d)
}
