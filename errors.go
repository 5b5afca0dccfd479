package dlock

import (
	"context"
	"errors"

	"github.com/dlock/dlock/driver"
)

// The errors a caller acts on, for use with errors.Is. A blocking call whose
// context ends returns the context's error (context.Canceled or
// context.DeadlineExceeded), never one of these.
var (
	// ErrNotAcquired: TryLock found the lock held by someone else.
	ErrNotAcquired = driver.ErrNotAcquired
	// ErrLeaseLost: the lease ended before it was released — it expired,
	// was broken, or the client could no longer prove it still held it.
	// Another owner may hold the lock now.
	ErrLeaseLost = driver.ErrLeaseLost
	// ErrNotHeld: Unlock of a lease that an earlier Unlock ended (or is
	// releasing), or Break of a free lock.
	ErrNotHeld = driver.ErrNotHeld
	// ErrInvalidName: a lock name that is empty, longer than 1024 bytes, or
	// not valid UTF-8.
	ErrInvalidName = driver.ErrInvalidName
	// ErrUnavailable: the backend could not be reached or failed. The
	// backend's own error is wrapped inside.
	ErrUnavailable = driver.ErrUnavailable
	// ErrUnsupported: the backend cannot do what an option asked for.
	ErrUnsupported = driver.ErrUnsupported
	// ErrInvalidOption: an option or argument out of range; the message names
	// it and the rule.
	ErrInvalidOption = driver.ErrInvalidOption
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("dlock: client closed")
)

// classify holds a driver's error to the contract for a driver that does
// not classify its errors itself (a third-party one returning its engine's
// raw errors): driver.Classify, which changes nothing in an error it made,
// so the errors of dlock's own backends pass unchanged. ErrInvalidOption,
// which a driver returns for bad input, is an answer too.
func classify(ctx context.Context, err error) error {
	if errors.Is(err, ErrInvalidOption) {
		return err
	}
	return driver.Classify(ctx, "", err)
}
