package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock/dlock/driver"
)

// Election chooses one leader at a time among the clients that campaign
// for a name (Curator's LeaderLatch, etcd's concurrency.Election,
// client-go's leaderelection). Leadership is a mutex lease of the name:
// Campaign returns it once this client leads, its Token is the term —
// higher for every later leader, so a resource that remembers the highest
// term it has seen can refuse a deposed leader's writes — and its Done
// channel closes as soon as leadership is lost (the lease could not be
// renewed in time, or it was broken), exactly as for a Mutex. It works on
// every backend; where the backend can queue, campaigners are served in
// arrival order.
//
// An Election does no I/O until a call and is safe for concurrent use.
type Election struct {
	c    *Client
	name string
	o    options
}

// Election returns the election called name. Options override the
// client's defaults; WithFair is implied where the backend can queue.
func (c *Client) Election(name string, opts ...Option) *Election {
	return &Election{c: c, name: name, o: c.o.with(opts)}
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Leadership describes a leader, as Leader and Observe report it.
type Leadership struct {
	// Value is what the leader published with Campaign (an address, an
	// ID); "" when nobody leads.
	Value string
	// Term is the leader's lease token: greater for every later leader.
	// 0 when nobody leads.
	Term uint64
	// Holder is the leader's metadata (host, PID, when it was elected);
	// Holder.Note is Value.
	Holder Holder
	// ExpiresIn is the time left on the leader's lease by the backend's
	// clock, 0 where the backend does not say.
	ExpiresIn time.Duration
	// Complete (Observe only) says that no leadership came and went
	// unreported between the report before this one and this one: true
	// when Observe follows the backend's history of changes
	// (driver.Watcher), false when it read the leadership at intervals,
	// where a leadership shorter than ObserveInterval may be missing. A
	// skip is never silent: an observer that must see every term checks
	// Complete.
	Complete bool
}

// Campaign waits until this client leads, or ctx ends, and returns the
// leadership's lease. value is published with it: Leader and Observe
// report it to everyone (it is the lease's note, and replaces a WithNote
// option). If ctx ends first, Campaign returns ctx's error and leaves
// nothing behind.
func (e *Election) Campaign(ctx context.Context, value string) (*Lease, error) {
	o := e.o
	o.note = value
	if e.c.caps.Fair {
		o.fair = true
	}
	return e.c.acquire(ctx, e.name, kind{limit: 1}, o, true)
}

// Resign ends the leadership l that Campaign returned: the lease is
// released, and the next campaigner is elected.
func (e *Election) Resign(ctx context.Context, l *Lease) error {
	return l.Unlock(ctx)
}

// Leader reports who leads now. It returns ErrNotHeld when nobody does.
func (e *Election) Leader(ctx context.Context) (Leadership, error) {
	in, err := e.c.Inspect(ctx, e.name)
	if err != nil {
		return Leadership{}, err
	}
	if !in.Held {
		return Leadership{}, ErrNotHeld
	}
	return leadershipOf(in), nil
}

func leadershipOf(in Info) Leadership {
	if !in.Held {
		return Leadership{}
	}
	return Leadership{Value: in.Holder.Note, Term: in.Token, Holder: in.Holder, ExpiresIn: in.ExpiresIn}
}

// ObserveInterval is how often Observe reads the leadership.
const ObserveInterval = 100 * time.Millisecond

// Observe reports the leadership now, then every change of it, in order,
// on the returned channel, until ctx ends (then the channel is closed): a
// new leader (a higher Term), or nobody (Term 0). The terms reported only
// ever increase, and a change is never reported twice.
//
// On a backend that keeps the history of changes (driver.Watcher: etcd),
// Observe follows it, and reports every leader, however briefly it led.
// Elsewhere, or if that history is lost (an etcd compaction), it reads the
// leadership every ObserveInterval: every leadership that lasts longer
// than that is reported; one that begins and ends between two reads is
// not. A read that fails is tried again; the channel is not closed before
// ctx ends unless the client is closed. Read the channel promptly: Observe
// waits for each value to be taken.
func (e *Election) Observe(ctx context.Context) <-chan Leadership {
	ch := make(chan Leadership)
	go func() {
		defer close(ch)
		last, reported := Leadership{}, false
		var lastTerm uint64
		report := func(now Leadership) bool {
			if now.Term < lastTerm && now.Term != 0 || reported && now.Term == last.Term {
				return true // stale, or no change
			}
			if reported && !last.Complete {
				// The report before came from a read at intervals (the
				// history was lost): what lies between is unknown.
				now.Complete = false
			}
			select {
			case ch <- now:
			case <-ctx.Done():
				return false
			}
			last, reported = now, true
			lastTerm = max(lastTerm, now.Term)
			return true
		}
		if w, ok := e.c.d.(driver.Watcher); ok {
			if changes, err := w.WatchHolder(ctx, e.name); err == nil {
				for in := range changes {
					ld := leadershipOf(infoFrom(in))
					ld.Complete = true
					if !report(ld) {
						return
					}
				}
			}
		}
		for failures := 0; ; {
			in, err := e.c.Inspect(ctx, e.name)
			switch {
			case errors.Is(err, ErrClosed) || ctx.Err() != nil:
				return
			case err != nil:
				failures++
			default:
				failures = 0
				if !report(leadershipOf(in)) {
					return
				}
			}
			wait := ObserveInterval
			if failures > 0 {
				wait = observeBackoff.Delay(failures - 1)
			}
			t := driver.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	return ch
}

// observeBackoff paces Observe's reads after failures.
var observeBackoff = driver.Backoff{Base: ObserveInterval, Cap: 2 * time.Second, Jitter: 0.5}
