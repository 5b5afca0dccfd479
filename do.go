package dlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock/dlock/driver"
)

// Do runs fn while holding the lock name: it waits for the lock, calls fn,
// and always releases the lock afterwards — Go's counterpart of Python's
// "with lock:". The context passed to fn is cancelled as soon as the lease
// is lost; fn should stop its work then, and pass Lease.Token to the
// resource it writes so that a write already in flight is refused.
//
// Do returns fn's error. If the lease was lost while fn ran, the returned
// error also wraps ErrLeaseLost, even when fn returned nil, since fn's work
// may not have been exclusive.
//
// The release after fn is made even if ctx has ended by then, within
// driver.CleanupTimeout. If fn panics, Do releases the lock the same way
// and then lets the panic continue with its own value, so that a panic
// recovered further up (as HTTP servers do) does not leave the lock held.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context, l *Lease) error, opts ...Option) error {
	return c.do(ctx, fn, func() (*Lease, error) { return c.Mutex(name, opts...).Lock(ctx) })
}

// do runs fn under the lease that acquire grants: Do's body, for every
// primitive.
func (c *Client) do(ctx context.Context, fn func(ctx context.Context, l *Lease) error, acquire func() (*Lease, error)) error {
	if fn == nil {
		return fmt.Errorf("%w: Do: fn is nil", ErrInvalidOption)
	}
	l, err := acquire()
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := l.over.AfterFire(func() { cancel(l.Err()) })
	defer stop()

	returned := false
	defer func() {
		if !returned {
			// fn panicked (or called runtime.Goexit): release the lock before
			// the panic unwinds further, since whoever recovers it cannot.
			uctx, ucancel := driver.CleanupContext(ctx)
			defer ucancel()
			_ = l.Unlock(uctx)
		}
	}()
	ferr := fn(fctx, l)
	returned = true

	lostErr := l.Err() // before Unlock, which ends the lease normally
	uctx, ucancel := driver.CleanupContext(ctx)
	defer ucancel()
	uerr := l.Unlock(uctx)
	if lostErr != nil && errors.Is(lostErr, ErrLeaseLost) {
		return errors.Join(ferr, lostErr)
	}
	if ferr != nil {
		return ferr
	}
	if uerr != nil && !errors.Is(uerr, ErrNotHeld) {
		return uerr
	}
	return nil
}
