// Package dlock is a distributed mutex for Go programs, with semaphores,
// read-write locks and leader election beside it: mutual exclusion
// between processes and machines, kept in a coordination engine you already
// run — etcd, Redis, a quorum of Redis nodes (Redlock), ZooKeeper,
// PostgreSQL, MySQL/MariaDB or Temporal.
//
// # Leases
//
// A sync.Mutex is held until Unlock. A distributed lock cannot be: its
// holder may crash, hang, or be cut off, and the others must not wait for
// it forever. So a grant is a lease: it lasts a TTL (WithTTL), dlock renews
// it automatically about every TTL/3 while you hold it, and a holder that
// crashes loses it within the TTL (at once on backends with sessions). A
// renewal that gets no answer is given up after TTL/3 and retried, so one
// request stuck on a server that cannot answer (a member cut from its
// cluster) does not cost the lease while a retry can be answered.
//
// A client sends at most 64 renewals at once. Leases taken together come
// due together; where the backend can renew many in one request (etcd,
// Redis, PostgreSQL, MySQL/MariaDB: driver.BatchExtender), the client
// sends at most 4 requests at once, and the renewals that come due while
// they are out go together in the next, up to 256 a request: a process
// holding a million locks spends a round trip on many renewals, not on
// each. A lone renewal still goes out at once, by itself.
//
// A lease can also be lost while you still believe you hold it: a long GC
// pause, a network partition, an administrator's Break. dlock makes the loss
// observable: Lease.Done is closed, and the context given to a Do callback
// is cancelled, as soon as this client can no longer prove it holds the
// lock — before the backend's TTL runs out and somebody else is granted it.
// The client's deadline is the send time of the last renewal the backend
// confirmed, plus the TTL, minus a margin for clock-rate drift, measured on
// the monotonic clock; the client and server clocks need not agree on the
// time of day, only run at nearly the same rate.
//
// Unlock and Do release the lock even when the caller's context has
// already ended, within a bound of their own (driver.CleanupTimeout); Do
// also releases it when its function panics. A release that fails is
// reported as an error, never as a release: the lease is no longer renewed,
// and the backend frees the lock when its TTL runs out.
//
// # Fencing tokens
//
// Noticing the loss is not enough: a process paused right after checking
// its lease can wake up and write after the lock has moved on. Every grant
// therefore carries a fencing token (Lease.Token), a number that strictly
// increases with every grant of the same name. Send it with each write to
// the protected resource and have the resource refuse a token lower than
// the highest it has seen; then a stale holder's writes are refused even
// when every clock and timer lied. Which backends keep tokens increasing
// across their own restart is stated by Capabilities.DurableFencing and in
// each backend's documentation.
//
// # Use
//
//	c, err := dlock.Open(ctx, "etcd://127.0.0.1:2379")
//	...
//	err = c.Do(ctx, "orders/42", func(ctx context.Context, l *dlock.Lease) error {
//		return store.Write(ctx, l.Token(), order) // ctx ends if the lease is lost
//	})
//
// Backends register a URL scheme when their package is imported, as
// database/sql drivers do; New takes a driver directly.
//
// # Beyond the mutex
//
// Semaphore (at most n holders), RWMutex (readers together, a writer
// alone, writers not starved) and Election (one leader, its term the
// token) grant the same kind of Lease, with the same renewal, loss
// notification and fencing. Not every backend has every primitive:
// driver.Capabilities says which, and a call on one that has not returns
// ErrUnsupported.
package dlock
