package driver

import "sync"

// Signal is a one-shot event: a backend fires it when it learns by itself
// that a grant's lease is gone (Grant.Lost). The portable layer waits for
// it with a callback, not a goroutine, so that a held lease costs no
// goroutine of its own however many are held.
//
// It is not a context: a held lease waits on one, and a context's
// cancellation, its Done channel and an AfterFunc on it cost several
// hundred bytes per lease, most of them never used. A Signal makes its
// channel only if Done is called, and a callback costs one small entry.
// The zero Signal is ready to use and has not fired; a Signal must not be
// copied once used.
type Signal struct {
	mu    sync.Mutex
	fired bool
	cause error
	done  chan struct{} // made by the first Done; closed when fired
	after []*afterFire  // callbacks waiting for the fire
}

type afterFire struct {
	f   func()
	off bool // stopped, or started: never runs (again)
}

// closedChan is the Done channel of a signal that fired before anyone
// asked for one.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// NewSignal returns a signal that has not fired.
func NewSignal() *Signal { return new(Signal) }

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
	for _, a := range after {
		a.off = true
	}
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
	a := &afterFire{f: f}
	s.mu.Lock()
	if s.fired {
		s.mu.Unlock()
		a.off = true
		go f()
		return func() bool { return false }
	}
	s.after = append(s.after, a)
	s.mu.Unlock()
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if a.off {
			return false
		}
		a.off = true
		for i, b := range s.after {
			if b == a {
				s.after = append(s.after[:i], s.after[i+1:]...)
				break
			}
		}
		return true
	}
}
