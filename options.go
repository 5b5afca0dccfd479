package dlock

import (
	"fmt"
	"log/slog"
	"time"
)

// DefaultTTL is the lease length when WithTTL is not given. A holder that
// crashes keeps the lock for at most this long on backends without sessions.
const DefaultTTL = 15 * time.Second

// Option configures a Client (as defaults for all its mutexes) or one Mutex
// or Do call (overriding the client's defaults).
type Option func(*options)

type options struct {
	ttl       time.Duration
	fair      bool
	lockDelay time.Duration
	note      string
	logger    *slog.Logger
	loggerSet bool // WithLogger was given: Open passes logger to the backend
	hooks     Hooks
	errs      []error // option errors, reported by the first call that uses them
}

func defaultOptions() options {
	return options{ttl: DefaultTTL, logger: slog.New(slog.DiscardHandler)}
}

func (o options) with(opts []Option) options {
	o.errs = append([]error(nil), o.errs...)
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// WithTTL sets the lease length. The lease is renewed about every TTL/3
// while held; a crashed holder's lock is freed within TTL. It must be
// positive and at least the backend's minimum (Capabilities.MinTTL).
func WithTTL(ttl time.Duration) Option {
	return func(o *options) {
		if ttl <= 0 {
			o.errs = append(o.errs, fmt.Errorf("%w: WithTTL(%v): the TTL must be positive", ErrInvalidOption, ttl))
			return
		}
		o.ttl = ttl
	}
}

// WithFair makes waiters be granted the lock in the order they asked for
// it. Backends without a queue return ErrUnsupported.
func WithFair() Option {
	return func(o *options) { o.fair = true }
}

// WithLockDelay keeps a lock unusable for d after its previous holder was
// lost rather than released (expired, crashed, broken), as Chubby and Consul
// do: Lock returns only after the delay, so that a lost holder's in-flight
// writes land before the next holder starts. Use it for resources that cannot
// check a fencing token. A lock released normally is handed over at once. On
// backends that cannot tell a loss from a release (Capabilities.LockDelay is
// false) the delay is applied after every grant.
func WithLockDelay(d time.Duration) Option {
	return func(o *options) {
		if d < 0 {
			o.errs = append(o.errs, fmt.Errorf("%w: WithLockDelay(%v): the delay must not be negative", ErrInvalidOption, d))
			return
		}
		o.lockDelay = d
	}
}

// WithNote adds free text to the holder metadata that Inspect shows next to
// the holder's host and process ID.
func WithNote(note string) Option {
	return func(o *options) {
		if len(note) > 1024 {
			o.errs = append(o.errs, fmt.Errorf("%w: WithNote: the note is %d bytes, the limit is 1024", ErrInvalidOption, len(note)))
			return
		}
		o.note = note
	}
}

// WithLogger sends the lock's events (grant, renewal failures, loss,
// release) to l. The default discards them.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		o.logger = l
		o.loggerSet = true
	}
}

// Hooks are called on a lock's events, for metrics. Any may be nil. They run
// synchronously on dlock's goroutines and must not block.
type Hooks struct {
	// Acquired: a lease was granted after waiting for waited.
	Acquired func(name string, token uint64, waited time.Duration)
	// Released: a lease was released after being held for held.
	Released func(name string, token uint64, held time.Duration)
	// Lost: a lease was lost; cause wraps ErrLeaseLost. It runs after the
	// lease's Done channel has closed.
	Lost func(name string, token uint64, cause error)
}

// WithHooks installs metrics hooks.
func WithHooks(h Hooks) Option {
	return func(o *options) { o.hooks = h }
}
