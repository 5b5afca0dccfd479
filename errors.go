package dlock

import (
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
