package temporallock

import (
	"fmt"
	"testing"
	"time"
)

// When polling waiters ask again. The first longPolls client waiters hold
// their waits open; every waiter behind them polls within [minPoll, wait
// slice], as often as the turnover says while holds are short, and seldom
// behind a hold that has lasted, however many wait: a queue of 24 behind a
// holder of 2s sends a few polls a second, not one per waiter per minPoll.
// Waiters up to queryFrom poll by update, the ones behind by query.
func TestPollAfter(t *testing.T) {
	const ttl = 15 * time.Second
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	queue := func(waiters int, turnover, held time.Duration) *mutex {
		m := &mutex{listening: map[string]int{}, turnover: turnover, pickedUp: now.Add(-held)}
		m.s.Holder = &entry{Owner: "holder", TTL: ttl, GrantedAt: now.Add(-held)}
		for i := range waiters {
			m.s.Queue = append(m.s.Queue, entry{Owner: fmt.Sprint(i), TTL: ttl})
		}
		return m
	}
	// rate is the polls a second of the whole queue.
	rate := func(m *mutex) float64 {
		r := 0.0
		for i := range m.s.Queue {
			rep := m.queuedReply(now, true, i, ttl)
			if i < longPolls {
				if rep.RetryAfter != 0 {
					t.Fatalf("waiter %d of the first %d told to poll after %v, want a wait held open", i, longPolls, rep.RetryAfter)
				}
				continue
			}
			if rep.RetryAfter < minPoll || rep.RetryAfter > waitSlice(ttl) {
				t.Fatalf("waiter %d polls after %v, want within [%v, %v]", i, rep.RetryAfter, minPoll, waitSlice(ttl))
			}
			if want := i >= queryFrom; rep.Query != want {
				t.Fatalf("waiter %d told to poll by query: %v, want %v (the first %d poll by update)", i, rep.Query, want, queryFrom)
			}
			r += 1 / rep.RetryAfter.Seconds()
		}
		return r
	}
	for _, waiters := range []int{5, 24, 1000} {
		for _, turnover := range []time.Duration{0, 20 * time.Millisecond, time.Second, time.Minute} {
			for _, held := range []time.Duration{0, 10 * time.Millisecond, 2 * time.Second, time.Hour} {
				rate(queue(waiters, turnover, held))
			}
		}
	}
	if r := rate(queue(24, 0, 2*time.Second)); r > 5 {
		t.Errorf("24 waiters behind a holder of 2s, no turnover known: %.1f polls a second, want at most 5", r)
	}
	if r := rate(queue(24, 20*time.Millisecond, 2*time.Second)); r > 5 {
		t.Errorf("24 waiters behind a holder of 2s, turnover 20ms: %.1f polls a second, want at most 5", r)
	}
	// Short holds: the first poller is back in time for its turn.
	m := queue(24, 300*time.Millisecond, 10*time.Millisecond)
	if got, want := m.queuedReply(now, true, longPolls, ttl).RetryAfter, 300*time.Millisecond; got != want {
		t.Errorf("turnover 300ms: waiter %d polls after %v, want %v", longPolls, got, want)
	}
	if got, want := m.queuedReply(now, true, longPolls+3, ttl).RetryAfter, 4*300*time.Millisecond; got != want {
		t.Errorf("turnover 300ms: waiter %d polls after %v, want %v", longPolls+3, got, want)
	}
}

// The turnover counts holds and hand-overs, not the time a name sat free:
// a queue that forms after a pause polls as often as the one before it.
func TestTurnoverLeavesFreeTimeOut(t *testing.T) {
	const ttl = 15 * time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &mutex{listening: map[string]int{"a": 1, "b": 1, "c": 1}}
	m.grant(t0, entry{Owner: "a", TTL: ttl})
	// a releases 30ms after it learned of its grant; b, waiting, takes it.
	m.s.Holder = nil
	m.grant(t0.Add(30*time.Millisecond), entry{Owner: "b", TTL: ttl})
	if m.turnover != 30*time.Millisecond {
		t.Fatalf("turnover %v after a hand-off 30ms after the grant, want 30ms", m.turnover)
	}
	// b releases with nobody queued (grantNext finds the queue empty and
	// grants nothing); the name sits free for 4s; c takes it.
	m.s.Holder = nil
	m.grantNext(nil)
	m.grant(t0.Add(4*time.Second), entry{Owner: "c", TTL: ttl})
	if m.turnover != 30*time.Millisecond {
		t.Errorf("turnover %v after the name sat free for 4s, want 30ms as before: the free time is no hand-over", m.turnover)
	}
	for i := range 24 {
		m.s.Queue = append(m.s.Queue, entry{Owner: fmt.Sprint(i), TTL: ttl})
	}
	now := t0.Add(4*time.Second + 10*time.Millisecond)
	if got, want := m.queuedReply(now, true, 23, ttl).RetryAfter, 30*time.Millisecond*time.Duration(23-longPolls+1); got != want {
		t.Errorf("the 24th waiter polls after %v, want %v (the turnover before the pause)", got, want)
	}
}
