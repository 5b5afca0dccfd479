package driver

import "context"

// Signal is a one-shot event: a backend fires it when it learns by itself
// that a grant's lease is gone (Grant.Lost). The portable layer waits for
// it with a callback, not a goroutine, so that a held lease costs no
// goroutine of its own however many are held.
type Signal struct {
	ctx  context.Context
	fire context.CancelCauseFunc
}

// NewSignal returns a signal that has not fired.
func NewSignal() *Signal {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Signal{ctx: ctx, fire: cancel}
}

// Fire fires the signal; later calls do nothing.
func (s *Signal) Fire() { s.fire(nil) }

// FireCause fires the signal with the reason the lease is gone (such as
// ErrSessionLost), which Cause returns; later calls do nothing.
func (s *Signal) FireCause(err error) { s.fire(err) }

// Cause returns the error FireCause gave, or nil if the signal has not
// fired or was fired by Fire.
func (s *Signal) Cause() error {
	if err := context.Cause(s.ctx); err != context.Canceled {
		return err
	}
	return nil
}

// Done returns a channel that is closed when the signal fires.
func (s *Signal) Done() <-chan struct{} { return s.ctx.Done() }

// Fired reports whether the signal has fired.
func (s *Signal) Fired() bool { return s.ctx.Err() != nil }

// AfterFire arranges for f to run in its own goroutine once the signal
// fires (at once if it has). stop unregisters f; it reports whether it
// stopped f from running.
func (s *Signal) AfterFire(f func()) (stop func() bool) { return context.AfterFunc(s.ctx, f) }
