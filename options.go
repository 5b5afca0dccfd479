package dlock

import (
	"context"
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
	loggerSet bool    // WithLogger was given: Open passes logger to the backend
	hooks     *Hooks  // never nil: noHooks without WithHooks
	errs      []error // option errors, reported by the first call that uses them
}

func defaultOptions() options {
	return options{ttl: DefaultTTL, logger: slog.New(slog.DiscardHandler), hooks: noHooks}
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

// Hooks are called on a lock's events, for metrics and tracing (package
// dlockotel builds OpenTelemetry metrics and spans on them). Any may be
// nil. They run synchronously on dlock's goroutines and must not block;
// those of one lease may run concurrently with one another (a renewal's
// report with the loss that a watch saw meanwhile).
//
// For one Lock or TryLock call, exactly one of Acquired and AcquireFailed
// runs (none if the name or an option was invalid). Acquired runs first
// among a lease's hooks; then Renewed and RenewalFailed for each renewal;
// then at most one of Released and Lost, once the lease has ended.
type Hooks struct {
	// Acquired: a lease was granted after waiting for waited (from the
	// call to the grant; a lock-delay, WithLockDelay, follows it).
	Acquired func(name string, token uint64, waited time.Duration)
	// AcquireFailed: Lock or TryLock returned err without a lease after
	// waited: an error wrapping ErrNotAcquired (TryLock found the lock
	// held), the context's error (the caller gave up), ErrUnavailable (the
	// backend failed) or ErrClosed.
	AcquireFailed func(name string, waited time.Duration, err error)
	// Renewed: the backend confirmed a renewal; rtt is its round trip.
	Renewed func(name string, token uint64, rtt time.Duration)
	// RenewalFailed: a renewal got no answer or failed (err wraps
	// ErrUnavailable or a timeout); it is retried until the lease's
	// deadline. A renewal the backend refused is a loss and goes to Lost.
	RenewalFailed func(name string, token uint64, err error)
	// Released: a lease was released after being held for held.
	Released func(name string, token uint64, held time.Duration)
	// Lost: a lease was lost; cause wraps ErrLeaseLost, and LossCause
	// tells why. It runs after the lease's Done channel has closed.
	Lost func(name string, token uint64, cause error)

	// Attempt, if set, runs when Lock or TryLock starts (after the name
	// and options are checked), with the caller's context. If it returns
	// hooks, those are called for this attempt and the lease it grants in
	// place of the others above: a tracer starts there a span that is a
	// child of ctx's, and ends it in the hooks it returns. The returned
	// hooks' own Attempt is not called.
	Attempt func(ctx context.Context, a LockAttempt) *Hooks
}

// LockAttempt describes one Lock or TryLock call to Hooks.Attempt.
type LockAttempt struct {
	Name string
	Wait bool // Lock: wait for the lock; false for TryLock
	Fair bool // WithFair
	TTL  time.Duration
}

// noHooks are the hooks of a client without WithHooks.
var noHooks = &Hooks{}

// forAttempt returns the hooks of one Lock or TryLock call.
func (h *Hooks) forAttempt(ctx context.Context, a LockAttempt) *Hooks {
	if a := h.Attempt(ctx, a); a != nil {
		return a
	}
	return h
}

// WithHooks installs metrics hooks.
func WithHooks(h Hooks) Option {
	return func(o *options) { o.hooks = &h }
}
