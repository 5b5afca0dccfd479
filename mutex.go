package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dlock/dlock/driver"
)

// Mutex is a distributed mutual-exclusion lock named by a string. Unlike
// sync.Mutex, each successful Lock returns a Lease, and it is the Lease that
// is unlocked. A Mutex is cheap (no I/O until Lock) and safe for concurrent
// use; two Mutex values with the same name on any clients of the same
// backend exclude each other.
type Mutex struct {
	c    *Client
	name string
	o    options
}

// Mutex returns the lock called name. Options override the client's
// defaults. The name is checked by Lock and TryLock: it must be 1..1024
// bytes of valid UTF-8.
func (c *Client) Mutex(name string, opts ...Option) *Mutex {
	return &Mutex{c: c, name: name, o: c.o.with(opts)}
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.name }

// Lock waits until the lock is granted, or ctx ends. It returns the lease,
// which is renewed in the background until Unlock or until it is lost (see
// Lease.Done). If ctx ends first, Lock returns ctx's error and leaves
// nothing behind: no queued waiter and no lock granted later.
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	return m.c.acquire(ctx, m.name, kind{limit: 1}, m.o, true)
}

// TryLock makes one attempt and returns ErrNotAcquired at once if someone
// else holds the lock.
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) {
	return m.c.acquire(ctx, m.name, kind{limit: 1}, m.o, false)
}

// kind is what a lease is of: a mutex (limit 1), one of limit permits of
// a semaphore, or a reader's or writer's lease of a read-write lock.
type kind struct {
	limit  int
	rw     bool // a read-write lock: fair waiting, writer preference
	shared bool // its reader
}

// acquire grants a lease of name of the kind k, waiting for it if wait:
// the one path of Mutex, Semaphore and RWMutex.
func (c *Client) acquire(ctx context.Context, name string, k kind, o options, wait bool) (*Lease, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	if err := c.check(name, k, o); err != nil {
		return nil, err
	}
	if k.rw && c.caps.Fair {
		o.fair = true // a writer waits in arrival order, not passed by later readers
	}
	if o.hooks.Attempt != nil {
		o.hooks = o.hooks.forAttempt(ctx, LockAttempt{Name: name, Wait: wait, Fair: o.fair, TTL: o.ttl})
	}
	now := driver.Now()
	if err := ctx.Err(); err != nil {
		o.acquireFailed(name, now, err)
		return nil, err
	}
	holder := encodeHolder(o.note, now.UTC().Round(time.Millisecond), k.limit, k.shared)
	req := driver.Request{Name: name, Owner: driver.NewNonce(), TTL: o.ttl, Wait: wait, Fair: o.fair, Holder: holder, Shared: k.shared}
	if k.limit > 1 {
		req.Limit = k.limit
	}

	g, err := c.d.Acquire(ctx, req)
	if err != nil {
		err = classify(ctx, err)
		if !errors.Is(err, ErrNotAcquired) && ctx.Err() == nil {
			o.logger.Warn("dlock: acquire failed", "name", name, "err", err)
		}
		o.acquireFailed(name, now, err)
		return nil, err
	}
	if g.Since.IsZero() {
		g.Since = now
	}
	if g.TTL <= 0 {
		g.TTL = req.TTL
	}
	l := newLease(c, o, req, g)
	if !c.track(l) {
		l.end(ErrClosed)
		rctx, cancel := driver.CleanupContext(ctx)
		defer cancel()
		_ = c.d.Release(rctx, l.held())
		o.acquireFailed(name, now, ErrClosed)
		return nil, ErrClosed
	}
	// Acquired runs before renewal starts: it comes before any other hook
	// of the lease, whose loss may be signalled from then on.
	if h := o.hooks.Acquired; h != nil {
		h(name, g.Token, driver.Since(now))
	}
	l.startRenewal(g.Lost)

	if o.lockDelay > 0 && (g.Recovered || !c.caps.LockDelay) {
		if err := l.sleep(ctx, o.lockDelay); err != nil {
			rctx, cancel := driver.CleanupContext(ctx)
			defer cancel()
			_ = l.Unlock(rctx)
			return nil, err
		}
	}
	if o.logger.Enabled(ctx, slog.LevelDebug) {
		o.logger.Debug("dlock: acquired", "name", name, "token", g.Token, "waited", driver.Since(now))
	}
	return l, nil
}

func (o *options) acquireFailed(name string, start time.Time, err error) {
	if h := o.hooks.AcquireFailed; h != nil {
		h(name, driver.Since(start), err)
	}
}

// check reports an invalid name, limit or option before any I/O.
func (c *Client) check(name string, k kind, o options) error {
	if c.isClosed() {
		return ErrClosed
	}
	if err := ValidateName(name); err != nil {
		return err
	}
	if len(o.errs) > 0 {
		return errors.Join(o.errs...)
	}
	if k.limit < 1 || k.limit > MaxPermits {
		return fmt.Errorf("%w: Semaphore(%q, %d): the number of permits must be 1..%d", ErrInvalidOption, name, k.limit, MaxPermits)
	}
	if k.limit > 1 && !c.caps.Semaphore {
		return fmt.Errorf("%w: Semaphore: this backend has no counted leases (%d permits asked for)", ErrUnsupported, k.limit)
	}
	if k.rw && !c.caps.RWMutex {
		return fmt.Errorf("%w: RWMutex: this backend has no read-write locks", ErrUnsupported)
	}
	if min := c.caps.MinTTL; min > 0 && o.ttl < min {
		return fmt.Errorf("%w: WithTTL(%v): this backend's shortest lease is %v", ErrInvalidOption, o.ttl, min)
	}
	if o.fair && !c.caps.Fair {
		return fmt.Errorf("%w: WithFair: this backend has no FIFO queue", ErrUnsupported)
	}
	return nil
}
