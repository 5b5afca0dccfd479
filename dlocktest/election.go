package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// electionTests are the election's part of the contract. An election is
// built on the mutex, so they run on every backend.
func (s *suite) electionTests() []test {
	return []test{
		{"ElectionHasOneLeaderAtATimeAndTermsIncrease", s.testElectionOneLeader},
		{"ElectionObserversSeeTheSameLeadersInOrder", s.testElectionObserve},
		{"ElectionLeaderLostToBreakIsObserved", s.testElectionBreak},
		{"ElectionObserverOfAWatcherSeesEveryTerm", s.testElectionEveryTerm},
	}
}

// The leader, another process, is killed: Leader reports it (its value,
// its term) until then, and a campaign wins within the TTL (before half of
// it on session backends) with a higher term, which Leader reports next.
func (s *suite) testElectionCrashedLeader(t *testing.T) {
	name := s.name(t, "elect")
	ttl := s.crashTTL()
	cmd, term := startChild(t, s.h.URL, name, childLeader, 0, ttl)
	c := s.client(t)
	e := c.Election(name)
	ld, err := e.Leader(testenv.Context(t, 30*time.Second))
	if err != nil || ld.Value != childValue || ld.Term != term {
		t.Fatalf("Leader while another process leads: %+v, %v; want value %q, term %d", ld, err, childValue, term)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), ttl+20*time.Second)
	defer cancel()
	lead, err := e.Campaign(ctx, "next")
	if err != nil {
		t.Fatalf("no new leader within the crashed leader's TTL %v (+20s): %v", ttl, err)
	}
	s.freedInTime(t, "leadership", killed, ttl)
	if lead.Token() <= term {
		t.Errorf("the new term %d, want > %d (the crashed leader's)", lead.Token(), term)
	}
	if ld, err := e.Leader(testenv.Context(t, 30*time.Second)); err != nil || ld.Value != "next" || ld.Term != lead.Token() {
		t.Errorf("Leader after the new campaign: %+v, %v; want value %q, term %d", ld, err, "next", lead.Token())
	}
	if err := e.Resign(testenv.Context(t, 30*time.Second), lead); err != nil {
		t.Errorf("Resign: %v", err)
	}
}

// Four clients campaign in turn, each leading for a moment and resigning:
// never two leaders at once, Leader reports the one leading with its
// value, and each term is above the one before.
func (s *suite) testElectionOneLeader(t *testing.T) {
	const clients, rounds = 4, 4
	name := s.name(t, "e")
	var (
		leading atomic.Int32
		mu      sync.Mutex
		terms   []uint64
	)
	s.eachClient(t, clients, func(i int, c *dlock.Client) error {
		e := c.Election(name)
		value := fmt.Sprintf("candidate-%d", i)
		for range rounds {
			ctx := testenv.Context(t, 120*time.Second)
			l, err := e.Campaign(ctx, value)
			if err != nil {
				return err
			}
			if n := leading.Add(1); n != 1 {
				t.Errorf("%d leaders at once", n)
			}
			mu.Lock()
			terms = append(terms, l.Token())
			mu.Unlock()
			if ld, err := e.Leader(ctx); err != nil || ld.Term != l.Token() || ld.Value != value {
				t.Errorf("while %q leads with term %d, Leader reports %+v, %v", value, l.Token(), ld, err)
			}
			time.Sleep(10 * time.Millisecond)
			leading.Add(-1)
			if err := e.Resign(ctx, l); err != nil {
				return err
			}
		}
		return nil
	})
	for i := 1; i < len(terms); i++ {
		if terms[i] <= terms[i-1] {
			t.Errorf("term %d after term %d", terms[i], terms[i-1])
		}
	}
	if _, err := s.client(t).Election(name).Leader(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Leader after every candidate resigned: got %v, want ErrNotHeld", err)
	}
}

// Two observers watch while three candidates lead in turn, each for a few
// observation intervals and until both observers have reported it, with
// no leader in between: both see the same
// sequence — each leader with its value and term, in order, and nobody
// between them.
func (s *suite) testElectionObserve(t *testing.T) {
	name := s.name(t, "e")
	ctx, stop := context.WithCancel(testenv.Context(t, 120*time.Second))
	defer stop()
	var seen [2][]dlock.Leadership
	var mu sync.Mutex // guards seen
	var wg sync.WaitGroup
	ready := make(chan struct{}, 2)
	for i := range seen {
		ch := s.client(t).Election(name).Observe(ctx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ld := range ch {
				mu.Lock()
				if len(seen[i]) == 0 {
					ready <- struct{}{}
				}
				seen[i] = append(seen[i], ld)
				mu.Unlock()
			}
		}()
	}
	<-ready
	<-ready
	// seenBoth waits, up to 20s, until both observers have reported n
	// leaderships: each term lasts at least five observation intervals,
	// and until both have seen it, so that a slow read (a loaded machine)
	// cannot skip a term. A term never seen shows below.
	seenBoth := func(n int) {
		time.Sleep(5 * dlock.ObserveInterval)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(dlock.ObserveInterval) {
			mu.Lock()
			m := min(len(seen[0]), len(seen[1]))
			mu.Unlock()
			if m >= n {
				return
			}
		}
	}
	var want []dlock.Leadership
	for i := range 3 {
		value := fmt.Sprintf("leader-%d", i)
		e := s.client(t).Election(name)
		l, err := e.Campaign(ctx, value)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, dlock.Leadership{Value: value, Term: l.Token()})
		seenBoth(1 + len(want))
		if err := e.Resign(ctx, l); err != nil {
			t.Fatal(err)
		}
		want = append(want, dlock.Leadership{})
		seenBoth(1 + len(want))
	}
	want = append([]dlock.Leadership{{}}, want...) // nobody led before
	stop()
	wg.Wait()
	for i, got := range seen {
		terms := func(ls []dlock.Leadership) []string {
			var out []string
			for _, l := range ls {
				out = append(out, fmt.Sprintf("%s/%d", l.Value, l.Term))
			}
			return out
		}
		if !slices.Equal(terms(got), terms(want)) {
			t.Errorf("observer %d saw %v, want %v", i, terms(got), terms(want))
		}
	}
}

// A leader whose lease is broken learns of it (Done), and an observer sees
// the leadership end.
func (s *suite) testElectionBreak(t *testing.T) {
	name := s.name(t, "e")
	ctx, stop := context.WithCancel(testenv.Context(t, 60*time.Second))
	defer stop()
	l, err := s.client(t).Election(name).Campaign(ctx, "doomed")
	if err != nil {
		t.Fatal(err)
	}
	obs := s.client(t).Election(name).Observe(ctx)
	if first := <-obs; first.Term != l.Token() || first.Value != "doomed" {
		t.Fatalf("observer first saw %+v, want the leader with term %d", first, l.Token())
	}
	if err := s.client(t).Break(ctx, name); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(s.h.ttl() + 5*time.Second):
		t.Fatalf("the broken leader's Done did not close within %v", s.h.ttl()+5*time.Second)
	}
	select {
	case next := <-obs:
		if next.Term != 0 {
			t.Errorf("after the Break the observer saw %+v, want nobody leading", next)
		}
	case <-time.After(5 * time.Second):
		t.Error("the observer did not see the leadership end within 5s")
	}
}

// On a backend that implements driver.Watcher, an observer sees every
// term, however short: ten leaders who resign at once are all reported,
// in order, each report Complete. Elsewhere Observe reads at intervals and
// may miss a short term, and its reports say so: none is Complete.
func (s *suite) testElectionEveryTerm(t *testing.T) {
	c := s.client(t)
	name := s.name(t, "e")
	ctx, stop := context.WithCancel(testenv.Context(t, 60*time.Second))
	defer stop()
	obs := c.Election(name).Observe(ctx)
	first := <-obs
	if first.Term != 0 {
		t.Fatalf("the observer first saw %+v, want nobody leading", first)
	}
	if _, ok := s.driver(t).(driver.Watcher); !ok {
		// Observe reads at intervals: a short term may go unseen, and
		// the reports say so.
		l, err := s.client(t).Election(name).Campaign(ctx, "read")
		if err != nil {
			t.Fatal(err)
		}
		defer mustUnlock(t, l)
		select {
		case ld := <-obs:
			if ld.Term != l.Token() || first.Complete || ld.Complete {
				t.Errorf("Observe without driver.Watcher reported %+v after %+v; want term %d, neither Complete", ld, first, l.Token())
			}
		case <-time.After(10 * time.Second):
			t.Errorf("the observer did not report the leader within 10s")
		}
		return
	}
	if !first.Complete {
		t.Errorf("Observe through driver.Watcher reported %+v, not Complete", first)
	}
	var want []uint64
	e := s.client(t).Election(name)
	for i := range 10 {
		l, err := e.Campaign(ctx, fmt.Sprintf("brief-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, l.Token())
		if err := e.Resign(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	var got []uint64
	for len(got) < len(want) {
		select {
		case ld := <-obs:
			if ld.Term != 0 {
				got = append(got, ld.Term)
			}
			if !ld.Complete {
				t.Errorf("Observe through driver.Watcher reported %+v, not Complete", ld)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the observer saw terms %v, want %v", got, want)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("the observer saw terms %v, want %v", got, want)
	}
}
