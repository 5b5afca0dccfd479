package dlock

import "github.com/dlock/dlock/driver"

// scheduled is a Lease as an entry of its client's scheduler
// (driver.Alarms), which runs its renewals and expiry checks when due:
// one timer for all of a client's leases, rather than one or two runtime
// timers, and their closures, per held lease. Due hands the lease its
// event (Lease.due): a renewal goes in a goroutine of its own, so that
// renewals due together go out at once and one that blocks delays no
// other lease's events.
//
// The scheduler is the Client's rather than the process's: a client's
// leases share its backend and nothing else, two clients (two tests) share
// no state, and an idle one costs nothing. Its lock comes after a lease's.
type scheduled Lease

func (s *scheduled) Alarm() *driver.Alarm { return &s.alarm }
func (s *scheduled) Due()                 { (*Lease)(s).due() }
