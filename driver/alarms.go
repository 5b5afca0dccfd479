package driver

import (
	"container/heap"
	"sync"
	"time"
)

// Alarms calls each entry's Due when its time comes, on the lease clock
// (see Now), with one timer for all of them: a heap of entries ordered by
// their time, and a timer (AfterFunc) armed for the earliest. It is for
// state kept per held lock — a lease's renewal and expiry, a lock node's
// deadline — where a runtime timer each, and the closure it calls, would
// be most of what holding a lock costs: an entry costs its Alarm, a few
// bytes inside it, and a slot of the heap. An idle Alarms costs nothing:
// its timer is made with the first entry.
//
// Due runs on the timer's goroutine and must not block: a network round
// trip, or anything that may wait on one, goes in a goroutine of its own,
// so that one slow entry delays no other. An entry's Due may also run
// after Stop, or early (it was set again meanwhile): it checks its own
// state. The zero Alarms is ready to use.
type Alarms[T Alarmed] struct {
	mu    sync.Mutex
	q     alarmHeap[T]
	timer *time.Timer
	armed time.Time // when the timer fires; zero when it is stopped or firing
	epoch time.Time // the origin of Alarm.at: the first time set
}

// Alarmed is an entry of Alarms: a pointer to a struct holding an Alarm.
type Alarmed interface {
	comparable
	// Alarm returns the entry's Alarm, which Alarms alone reads and writes.
	Alarm() *Alarm
	// Due runs when the time the entry was set for has come.
	Due()
}

// Alarm is an entry's place in an Alarms; its zero value is not set.
type Alarm struct {
	at   int64 // the time set, in nanoseconds after the Alarms' epoch
	slot int32 // the index in the heap, plus one; 0: not set
}

// Set has e's Due run at at (a reading of Now), replacing an earlier Set.
func (a *Alarms[T]) Set(e T, at time.Time) {
	a.mu.Lock()
	if a.epoch.IsZero() {
		a.epoch = at
	}
	al := e.Alarm()
	al.at = int64(at.Sub(a.epoch))
	if al.slot == 0 {
		heap.Push(&a.q, e)
	} else {
		heap.Fix(&a.q, int(al.slot-1))
	}
	a.arm()
	a.mu.Unlock()
}

// Stop unsets e, if it is set. A Due already under way still runs.
func (a *Alarms[T]) Stop(e T) {
	a.mu.Lock()
	if al := e.Alarm(); al.slot != 0 {
		heap.Remove(&a.q, int(al.slot-1))
	}
	a.mu.Unlock()
	// The timer is left armed: it finds nothing due, and stops.
}

// arm makes the timer fire when the earliest entry is due, unless it
// fires before then already (run arms it again). a.mu is held.
func (a *Alarms[T]) arm() {
	if len(a.q) == 0 {
		return
	}
	next := a.epoch.Add(time.Duration(a.q[0].Alarm().at))
	if !a.armed.IsZero() && !next.Before(a.armed) {
		return
	}
	a.armed = next
	if a.timer == nil {
		a.timer = AfterFunc(Until(next), a.run)
		return
	}
	ResetTimer(a.timer, Until(next))
}

// run is the timer's callback: it runs Due of each entry whose time has
// come, and arms the timer for the next.
func (a *Alarms[T]) run() {
	var due []T
	a.mu.Lock()
	a.armed = time.Time{}
	now := int64(Since(a.epoch))
	for len(a.q) > 0 && a.q[0].Alarm().at <= now {
		due = append(due, heap.Pop(&a.q).(T))
	}
	a.arm()
	a.mu.Unlock()
	for _, e := range due {
		e.Due()
	}
}

// Len returns the number of entries set.
func (a *Alarms[T]) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.q)
}

type alarmHeap[T Alarmed] []T

func (h alarmHeap[T]) Len() int           { return len(h) }
func (h alarmHeap[T]) Less(i, j int) bool { return h[i].Alarm().at < h[j].Alarm().at }
func (h alarmHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].Alarm().slot, h[j].Alarm().slot = int32(i+1), int32(j+1)
}
func (h *alarmHeap[T]) Push(x any) {
	e := x.(T)
	e.Alarm().slot = int32(len(*h) + 1)
	*h = append(*h, e)
}
func (h *alarmHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	var zero T
	old[len(old)-1] = zero
	*h = old[:len(old)-1]
	e.Alarm().slot = 0
	return e
}
