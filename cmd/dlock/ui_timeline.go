package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/dlock/dlock"
)

// The dashboard's timeline is derived from consecutive polls of the
// backend, not read from it: no backend keeps a history of grants. What two
// polls show, and what the timeline infers from it:
//
//   - a name held with a token the previous poll did not see: a grant
//     (the first poll's locks are "held when the dashboard started");
//   - a token seen before and gone now (the lock free, or held under
//     another token): that grant ended. It ended by a break if this
//     dashboard broke it; by expiry (a loss: the holder did not renew) if
//     the expiry the backend reported at the previous poll had passed by
//     this one; otherwise by a release — or by a break from another
//     client, which the backend does not tell apart. On backends that do
//     not report an expiry (sessions), a release cannot be told from a
//     loss.
//
// Times are those of the poll that noticed the change, so they are exact to
// the poll interval; a grant that began and ended between two polls is not
// seen at all.

// pollSnapshot is one poll of the backend.
type pollSnapshot struct {
	at    time.Time // when the poll was sent: expiries are counted from here
	locks map[string]dlock.Info
	// deadlines are the held locks' expiries, by the last poll that
	// reported one: a lease that expired is reported held without an
	// expiry (etcd: TTL -1) until the backend deletes it.
	deadlines map[string]time.Time
}

// newSnapshot is the poll sent at at, which found infos; prev is the
// poll before it, or nil.
func newSnapshot(prev *pollSnapshot, at time.Time, infos []dlock.Info) pollSnapshot {
	s := pollSnapshot{at: at, locks: make(map[string]dlock.Info, len(infos)), deadlines: map[string]time.Time{}}
	for _, in := range infos {
		s.locks[in.Name] = in
		switch {
		case !in.Held:
		case in.ExpiresIn > 0:
			s.deadlines[in.Name] = at.Add(in.ExpiresIn)
		}
		// The same grant: keep the latest expiry seen. A backend that
		// reports whole seconds (etcd) rounds down, so the latest of
		// several polls is the closest to the true one.
		if d, ok := prev.deadline(in); ok && (s.deadlines[in.Name].IsZero() || d.After(s.deadlines[in.Name])) {
			s.deadlines[in.Name] = d
		}
	}
	return s
}

// deadline is the expiry prev knew for in's grant.
func (prev *pollSnapshot) deadline(in dlock.Info) (time.Time, bool) {
	if prev == nil || !in.Held {
		return time.Time{}, false
	}
	if p := prev.locks[in.Name]; !p.Held || p.Token != in.Token {
		return time.Time{}, false
	}
	d, ok := prev.deadlines[in.Name]
	return d, ok
}

// timelineEvent is one entry of the timeline.
type timelineEvent struct {
	At     int64  `json:"at"` // Unix milliseconds of the poll that noticed it
	Name   string `json:"name"`
	Kind   string `json:"kind"` // seen, grant, release, expiry, break
	Token  uint64 `json:"token"`
	Holder string `json:"holder"`
	Detail string `json:"detail"`
}

// timeline lists what changed from prev to cur, in name order: for each
// name, the end of the old grant before the new one. prev is nil at the
// first poll. broken holds, by name, the token this dashboard broke.
func timeline(prev *pollSnapshot, cur pollSnapshot, broken map[string]uint64) []timelineEvent {
	names := make([]string, 0, len(cur.locks))
	for n := range cur.locks {
		names = append(names, n)
	}
	if prev != nil {
		for n := range prev.locks {
			if _, ok := cur.locks[n]; !ok {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	at := cur.at.UnixMilli()
	var out []timelineEvent
	for _, n := range names {
		var p dlock.Info
		if prev != nil {
			p = prev.locks[n]
		}
		c := cur.locks[n]
		if p.Held && (!c.Held || c.Token != p.Token) {
			e := timelineEvent{At: at, Name: n, Token: p.Token, Holder: holderText(p.Holder)}
			deadline, known := prev.deadlines[n]
			switch {
			case broken[n] == p.Token:
				e.Kind, e.Detail = "break", "broken from this dashboard"
			case known && !cur.at.Before(deadline):
				e.Kind, e.Detail = "expiry", fmt.Sprintf("lost: gone after the expiry the backend last reported (%s) had passed; the holder did not renew", deadline.Format("15:04:05.000"))
			case known:
				e.Kind, e.Detail = "release", "gone before its expiry: released (or broken by another client)"
			default:
				e.Kind, e.Detail = "release", "gone: released, broken, or its session lost (this backend reports no expiry to tell them apart)"
			}
			out = append(out, e)
		}
		if c.Held && (!p.Held || c.Token != p.Token) {
			e := timelineEvent{At: at, Name: n, Kind: "grant", Token: c.Token, Holder: holderText(c.Holder), Detail: "granted"}
			switch {
			case prev == nil:
				e.Kind, e.Detail = "seen", "held when the dashboard started"
			case p.Held:
				e.Detail = fmt.Sprintf("granted: handed off from token %d", p.Token)
			}
			out = append(out, e)
		}
	}
	return out
}

// changed reports whether cur shows something prev did not: another set
// of locks, holder, token or waiters, or an expiry moved by a renewal
// (the page counts expiries down by itself between pushes).
func changed(prev *pollSnapshot, cur pollSnapshot) bool {
	if prev == nil || len(prev.locks) != len(cur.locks) {
		return true
	}
	for n, c := range cur.locks {
		p, ok := prev.locks[n]
		if !ok || p.Held != c.Held || p.Token != c.Token || !sameHolder(p.Holder, c.Holder) || !slices.EqualFunc(p.Waiters, c.Waiters, sameHolder) {
			return true
		}
		moved := cur.at.Add(c.ExpiresIn).Sub(prev.at.Add(p.ExpiresIn))
		if (p.ExpiresIn > 0) != (c.ExpiresIn > 0) || moved.Abs() >= 500*time.Millisecond {
			return true
		}
	}
	return false
}

// sameHolder compares holders decoded by two polls (== on time.Time would
// compare their locations too).
func sameHolder(a, b dlock.Holder) bool {
	return a.Host == b.Host && a.PID == b.PID && a.Note == b.Note && a.AcquiredAt.Equal(b.AcquiredAt)
}
