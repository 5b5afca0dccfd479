package dlock

import (
	"container/heap"
	"sync"
	"time"

	"github.com/dlock/dlock/driver"
)

// scheduler runs the renewals and expiry checks of a Client's leases when
// they are due: a heap of leases ordered by the time of their next event,
// and one timer (driver.AfterFunc, on the lease clock) armed for the
// earliest. A held lease costs a heap slot and a few fields, not timers
// of its own, and no goroutine: the timer's callback pops what is due and
// hands each lease its event (Lease.due), which starts a renewal in a
// goroutine of its own, so that renewals due together run at once and a
// slow one delays neither another lease's renewal nor its expiry.
//
// It is per Client rather than per process: a Client's leases share its
// backend and nothing else, a test's clients do not share state, and an
// idle one costs nothing (its timer is made with its first lease). Its
// lock comes after a lease's.
type scheduler struct {
	mu    sync.Mutex
	q     leaseHeap
	timer *time.Timer
	armed time.Time // when the timer fires; zero when it is stopped or firing
	epoch time.Time // the origin of Lease.at: the first time scheduled
}

// set schedules l's next event at at, replacing any earlier schedule.
func (s *scheduler) set(l *Lease, at time.Time) {
	s.mu.Lock()
	if s.epoch.IsZero() {
		s.epoch = at
	}
	l.at = int64(at.Sub(s.epoch))
	if l.slot < 0 {
		heap.Push(&s.q, l)
	} else {
		heap.Fix(&s.q, int(l.slot))
	}
	s.arm()
	s.mu.Unlock()
}

// remove unschedules l, if it is scheduled.
func (s *scheduler) remove(l *Lease) {
	s.mu.Lock()
	if l.slot >= 0 {
		heap.Remove(&s.q, int(l.slot))
	}
	s.mu.Unlock()
	// The timer is left armed: it finds nothing due, and stops.
}

// arm makes the timer fire when the earliest event is due, unless it
// fires before then already (run arms it again). s.mu is held.
func (s *scheduler) arm() {
	if len(s.q) == 0 {
		return
	}
	next := s.epoch.Add(time.Duration(s.q[0].at))
	if !s.armed.IsZero() && !next.Before(s.armed) {
		return
	}
	s.armed = next
	if s.timer == nil {
		s.timer = driver.AfterFunc(driver.Until(next), s.run)
		return
	}
	driver.ResetTimer(s.timer, driver.Until(next))
}

// run is the timer's callback: it hands each lease whose event is due
// its event, and arms the timer for the next one.
func (s *scheduler) run() {
	var due []*Lease
	s.mu.Lock()
	s.armed = time.Time{}
	now := int64(driver.Since(s.epoch))
	for len(s.q) > 0 && s.q[0].at <= now {
		due = append(due, heap.Pop(&s.q).(*Lease))
	}
	s.arm()
	s.mu.Unlock()
	for _, l := range due {
		l.due()
	}
}

// leaseHeap orders leases by their next event (Lease.at); Lease.slot is a
// lease's index in it, -1 when it is not in it.
type leaseHeap []*Lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].slot, h[j].slot = int32(i), int32(j)
}
func (h *leaseHeap) Push(x any) {
	l := x.(*Lease)
	l.slot = int32(len(*h))
	*h = append(*h, l)
}
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.slot = -1
	return l
}
