package dlock

import (
	"sync"

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

// renewals runs a client's due renewals, at most maxRenewals at once, in
// the order they came due. Its lock comes after a lease's: due adds under
// the lease's lock, and a renewer runs Lease.renew holding neither.
type renewals struct {
	mu      sync.Mutex
	queue   []*Lease
	running int
}

// add runs l's renewal now if fewer than maxRenewals are in flight, or
// queues it for the next renewer free.
func (r *renewals) add(l *Lease) {
	r.mu.Lock()
	if r.running < maxRenewals {
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
	for {
		l.renew()
		r.mu.Lock()
		if len(r.queue) == 0 {
			r.running--
			r.queue = nil // let a large burst's array go
			r.mu.Unlock()
			return
		}
		l = r.queue[0]
		r.queue[0] = nil
		r.queue = r.queue[1:]
		r.mu.Unlock()
	}
}
