package dlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock/dlock/driver"
)

// scheduled is a Lease as an entry of its client's scheduler
// (driver.Alarms), which runs its renewals and expiry checks when due:
// one timer for all of a client's leases, rather than one or two runtime
// timers, and their closures, per held lease. Due hands the lease its
// event (Lease.due): a renewal goes to the client's renewers (renewals),
// so that renewals due together go out at once and one that blocks
// delays no lease's expiry check.
//
// The scheduler is the Client's rather than the process's: a client's
// leases share its backend and nothing else, two clients (two tests) share
// no state, and an idle one costs nothing. Its lock comes after a lease's.
type scheduled Lease

func (s *scheduled) Alarm() *driver.Alarm { return &s.alarm }
func (s *scheduled) Due()                 { (*Lease)(s).due() }

// maxRenewals bounds the renewals a client has in flight at once. A
// client holding many leases taken together has them all come due
// together: one goroutine and one request each, at once, took a process
// holding 160,000 etcd locks to 7 GB and stalled it (each renewal a
// keep-alive stream of its own), where 64 requests in flight renew 64,000
// leases a second at a round trip of 1 ms. A renewal waiting its turn
// delays no expiry check: a lease whose renewal is not sent by its
// deadline is lost, as any late one is.
const maxRenewals = 64

// maxBatchRenewals bounds the requests in flight of a client whose backend
// renews many leases in one (driver.BatchExtender): each carries up to
// driver.MaxBatch leases, so 4 renew as many as 64 single ones would, and
// renewals that come due faster than 4 requests are answered queue up and
// go out together. With 64 in flight, renewals coming due at 2,700 a
// second (a million leases of a 10-minute TTL) were each answered before
// the next came due and went out one by one, each its own request.
const maxBatchRenewals = 4

// renewals runs a client's due renewals, at most maxRenewals requests at
// once, in the order they came due. Its lock comes after a lease's: due
// adds under the lease's lock, and a renewer runs Lease.renew holding
// neither. When the backend renews many leases in one request
// (driver.BatchExtender), at most maxBatchRenewals requests are in
// flight, and a renewer that finds renewals queued takes up to
// driver.MaxBatch of them into one request: a lone renewal goes out at
// once, by itself, and renewals that come due faster than they are
// answered (leases taken together come due together) cost a round trip
// per batch rather than per lease.
type renewals struct {
	batch driver.BatchExtender // nil: the backend renews one lease a request
	limit int                  // requests in flight at most

	mu      sync.Mutex
	queue   []*Lease
	running int
}

// add runs l's renewal now if fewer than limit are in flight, or queues
// it for the next renewer free.
func (r *renewals) add(l *Lease) {
	r.mu.Lock()
	if r.running < r.limit {
		r.running++
		r.mu.Unlock()
		go r.run(l)
		return
	}
	r.queue = append(r.queue, l)
	r.mu.Unlock()
}

// run renews l, then the queued leases, until none is left.
func (r *renewals) run(l *Lease) {
	l.renew()
	var batch []*Lease
	for {
		r.mu.Lock()
		if len(r.queue) == 0 {
			r.running--
			r.queue = nil // let a large burst's array go
			r.mu.Unlock()
			return
		}
		n := 1
		if r.batch != nil {
			n = min(len(r.queue), driver.MaxBatch)
		}
		batch = append(batch[:0], r.queue[:n]...)
		clear(r.queue[:n])
		r.queue = r.queue[n:]
		r.mu.Unlock()
		if len(batch) == 1 {
			batch[0].renew()
		} else {
			r.renewBatch(batch)
		}
		clear(batch)
	}
}

// renewBatch renews ls in one request. The request is bounded by the
// earliest of their bounds (each lease's deadline, or a third of its TTL):
// leases queued together came due together, and one answered late proves
// nothing for any of them.
func (r *renewals) renewBatch(ls []*Lease) {
	ext := make([]driver.Extension, 0, len(ls))
	sent := make([]time.Time, 0, len(ls))
	live := ls[:0]
	var bound time.Time
	for _, l := range ls {
		s, b, ok := l.renewBegin()
		if !ok {
			continue
		}
		if len(live) == 0 || b.Before(bound) {
			bound = b
		}
		live = append(live, l)
		sent = append(sent, s)
		ext = append(ext, driver.Extension{Held: l.held(), TTL: l.ttl})
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := driver.WithDeadline(context.Background(), bound)
	errs := r.batch.ExtendBatch(ctx, ext)
	cancel()
	for i, l := range live {
		err := errBatchAnswer
		if len(errs) == len(live) {
			err = errs[i]
		}
		l.renewEnd(sent[i], err)
	}
}

// errBatchAnswer settles the renewals of a batch whose backend did not
// answer each of them (a driver's bug): each is retried, as a failed one.
var errBatchAnswer = fmt.Errorf("%w: the batched renewal did not answer every lease", ErrUnavailable)
