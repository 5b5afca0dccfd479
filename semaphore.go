package dlock

import (
	"context"
)

// MaxPermits is the largest number of permits a Semaphore may have.
const MaxPermits = 10000

// Semaphore is a counting lock: at most n leases of its name are held at
// once, across every client of the backend (Redisson's
// RPermitExpirableSemaphore, Curator's InterProcessSemaphoreV2, consul
// lock -n). Each permit is a Lease of its own, with everything a mutex's
// lease has: renewal, loss notification (Done), and a fencing token.
//
// Tokens of one name increase strictly in grant order, across all of its
// permits: a resource that lets at most n writers in can refuse a write
// whose token is below the lowest of the n highest tokens it has accepted,
// and a writer refused that way has lost its permit.
//
// A Semaphore, like a Mutex, does no I/O until Acquire and is safe for
// concurrent use. A name is either a mutex or a semaphore: do not use one
// name for both.
//
// Changing n. Every client asks with its own n: a request is granted only
// while fewer than its own n leases are held. To raise the limit, start
// clients with the higher n: each is granted while fewer than its n are
// held (on a backend that queues, in arrival order: not ahead of a waiter
// that asked with a lower n). To lower it, start clients with the lower n:
// holders above it keep their permits until they release them (nothing
// revokes a lease), and no client with the lower n is granted one until
// fewer than the lower n are held. Clients still running with the old,
// higher n keep being granted up to it. dlocktest checks the lowered limit
// and clients that disagree.
//
// Not every backend offers semaphores: Capabilities.Semaphore in package
// driver says which, and Acquire on one that does not returns
// ErrUnsupported.
type Semaphore struct {
	c    *Client
	name string
	n    int
	o    options
}

// Semaphore returns the semaphore called name with n permits. Options
// override the client's defaults. The name and n are checked by Acquire and
// TryAcquire: the name as for a Mutex, n must be 1..MaxPermits. A Semaphore
// with one permit is a Mutex of the same name.
func (c *Client) Semaphore(name string, n int, opts ...Option) *Semaphore {
	return &Semaphore{c: c, name: name, n: n, o: c.o.with(opts)}
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns n, the number of leases that may be held at once.
func (s *Semaphore) Permits() int { return s.n }

// Acquire waits until a permit is granted, or ctx ends. It returns the
// permit's lease, renewed in the background until Unlock or until it is
// lost. If ctx ends first, Acquire returns ctx's error and leaves nothing
// behind: no queued waiter and no permit granted later.
func (s *Semaphore) Acquire(ctx context.Context) (*Lease, error) {
	return s.c.acquire(ctx, s.name, kind{limit: s.n}, s.o, true)
}

// TryAcquire makes one attempt and returns ErrNotAcquired at once if all n
// permits are held.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Lease, error) {
	return s.c.acquire(ctx, s.name, kind{limit: s.n}, s.o, false)
}

// DoLimited runs fn while holding one of n permits of the semaphore name,
// as Do does for a mutex: it waits for a permit, calls fn with a context
// that is cancelled if the permit's lease is lost, and always releases the
// permit afterwards, even if fn panics.
func (c *Client) DoLimited(ctx context.Context, name string, n int, fn func(ctx context.Context, l *Lease) error, opts ...Option) error {
	return c.do(ctx, fn, func() (*Lease, error) { return c.Semaphore(name, n, opts...).Acquire(ctx) })
}
