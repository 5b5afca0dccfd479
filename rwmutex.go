package dlock

import "context"

// RWMutex is a distributed read-write lock: any number of readers hold it
// together, or one writer alone (Redisson's RReadWriteLock, Curator's
// InterProcessReadWriteLock). Each grant, a reader's or the writer's, is a
// Lease with everything a mutex's lease has: renewal, loss notification
// (Done), and a fencing token.
//
// Writers are preferred: waiters are served in arrival order, and a reader
// that arrives while a writer waits queues behind that writer, so a steady
// stream of readers cannot starve it.
//
// Tokens of one name increase strictly in grant order across readers and
// writers: a writer's token is above that of every reader granted before
// it, and the token of every reader granted after the writer is above the
// writer's. One resource can therefore fence readers and writers alike: it
// refuses a write whose token is below the highest token it has seen, and
// a read whose token is below the highest writer's token it has seen.
//
// An RWMutex does no I/O until a lock call and is safe for concurrent use.
// A name is a mutex, a semaphore or a read-write lock: do not use one name
// for two of them. Not every backend offers read-write locks:
// Capabilities.RWMutex in package driver says which, and the lock calls on
// one that does not return ErrUnsupported.
type RWMutex struct {
	c    *Client
	name string
	o    options
}

// RWMutex returns the read-write lock called name. Options override the
// client's defaults; waiting is always fair where the backend can queue
// (WithFair is implied).
func (c *Client) RWMutex(name string, opts ...Option) *RWMutex {
	return &RWMutex{c: c, name: name, o: c.o.with(opts)}
}

// Name returns the lock's name.
func (rw *RWMutex) Name() string { return rw.name }

// RLock waits until a reader's lease is granted — no writer holds the lock
// or waits ahead — or ctx ends, and returns the lease. If ctx ends first,
// RLock returns ctx's error and leaves nothing behind.
func (rw *RWMutex) RLock(ctx context.Context) (*Lease, error) {
	return rw.c.acquire(ctx, rw.name, kind{limit: 1, rw: true, shared: true}, rw.o, true)
}

// TryRLock makes one attempt at a reader's lease and returns
// ErrNotAcquired at once if a writer holds the lock or waits for it.
func (rw *RWMutex) TryRLock(ctx context.Context) (*Lease, error) {
	return rw.c.acquire(ctx, rw.name, kind{limit: 1, rw: true, shared: true}, rw.o, false)
}

// Lock waits until the writer's lease is granted — no reader or writer
// holds the lock — or ctx ends, and returns the lease. While it waits,
// readers that arrive after it wait behind it.
func (rw *RWMutex) Lock(ctx context.Context) (*Lease, error) {
	return rw.c.acquire(ctx, rw.name, kind{limit: 1, rw: true}, rw.o, true)
}

// TryLock makes one attempt at the writer's lease and returns
// ErrNotAcquired at once if anyone holds the lock.
func (rw *RWMutex) TryLock(ctx context.Context) (*Lease, error) {
	return rw.c.acquire(ctx, rw.name, kind{limit: 1, rw: true}, rw.o, false)
}

// DoShared runs fn while holding a reader's lease of the read-write lock
// name, as Do does under a mutex: the context given to fn is cancelled if
// the lease is lost, and the lease is always released afterwards, even if
// fn panics. Take the writer's lease with RWMutex(name).Lock, or with
// DoExclusive.
func (c *Client) DoShared(ctx context.Context, name string, fn func(ctx context.Context, l *Lease) error, opts ...Option) error {
	return c.do(ctx, fn, func() (*Lease, error) { return c.RWMutex(name, opts...).RLock(ctx) })
}

// DoExclusive runs fn while holding the writer's lease of the read-write
// lock name, as Do does under a mutex.
func (c *Client) DoExclusive(ctx context.Context, name string, fn func(ctx context.Context, l *Lease) error, opts ...Option) error {
	return c.do(ctx, fn, func() (*Lease, error) { return c.RWMutex(name, opts...).Lock(ctx) })
}
