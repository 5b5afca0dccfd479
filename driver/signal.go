package driver

import "sync"

// Signal is a one-shot event: a backend fires it when it learns by itself
// that a grant's lease is gone (Grant.Lost). The portable layer waits for
// it with a callback, not a goroutine, so that a held lease costs no
// goroutine of its own however many are held.
//
// A signal is a few words and a callback: every held lock has one, so it
// is kept smaller than a context (whose AfterFunc alone costs some 500
// bytes); its channel is made only when Done asks for it.
type Signal struct {
	mu    sync.Mutex
	fired bool
	cause error
	done  chan struct{} // nil until Done or Fire needs it
	after []*afterFire  // the callbacks AfterFire registered, not yet run
}

type afterFire struct{ f func() }

// closedChan is the Done channel of a signal that fired before Done was
// asked for.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// NewSignal returns a signal that has not fired.
func NewSignal() *Signal { return &Signal{} }

// Fire fires the signal; later calls do nothing.
func (s *Signal) Fire() { s.FireCause(nil) }

// FireCause fires the signal with the reason the lease is gone (such as
// ErrSessionLost), which Cause returns; later calls do nothing.
func (s *Signal) FireCause(err error) {
	s.mu.Lock()
	if s.fired {
		s.mu.Unlock()
		return
	}
	s.fired, s.cause = true, err
	if s.done != nil {
		close(s.done)
	}
	after := s.after
	s.after = nil
	s.mu.Unlock()
	for _, a := range after {
		go a.f()
	}
}

// Cause returns the error FireCause gave, or nil if the signal has not
// fired or was fired by Fire.
func (s *Signal) Cause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cause
}

// Done returns a channel that is closed when the signal fires.
func (s *Signal) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		if s.fired {
			return closedChan
		}
		s.done = make(chan struct{})
	}
	return s.done
}

// Fired reports whether the signal has fired.
func (s *Signal) Fired() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fired
}

// AfterFire arranges for f to run in its own goroutine once the signal
// fires (at once if it has). stop unregisters f; it reports whether it
// stopped f from running.
func (s *Signal) AfterFire(f func()) (stop func() bool) {
	s.mu.Lock()
	if s.fired {
		s.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	a := &afterFire{f: f}
	s.after = append(s.after, a)
	s.mu.Unlock()
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, b := range s.after {
			if b == a {
				s.after = append(s.after[:i], s.after[i+1:]...)
				return true
			}
		}
		return false
	}
}
