package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// testBatchRenewal checks a backend's driver.BatchExtender: one
// ExtendBatch of driver.MaxBatch leases (48 on a backend with sessions) —
// the longest name among them, two TTLs, and semaphore permits where the
// backend has them — renews each live lease for its TTL, and answers
// ErrLeaseLost for each one that was released, expired (and stays
// expired), or broken and taken by another owner, whose lease it leaves
// alone.
//
// A backend whose lease length is its own, not the one asked for (a
// ZooKeeper lease lasts as long as its session allows), grants every lease
// for that length L: its leases are kept alive one by one until the
// expiring one is gone, then left unrenewed for L/2 before the batch; each
// renewed lease must then outlive the deadline it had without the batch,
// which Inspect cannot show on such a backend (ExpiresIn is 0), so its
// Grant.Lost is watched instead.
func (s *suite) testBatchRenewal(t *testing.T) {
	d, other := s.driver(t), s.client(t)
	bx := d.(driver.BatchExtender)
	ctx := testenv.Context(t, 120*time.Second)
	// Leases of 10 or 12 TTLs, renewed 2 TTLs after the last grant: a
	// renewed one then ends at least 2 TTLs later than it would have.
	ttl := s.h.ttl()
	n := driver.MaxBatch
	if s.caps.Sessions {
		n = 48 // a backend's session may be a connection per held lock
	}
	expiring := n - 1 // granted last, for one TTL, and left to expire
	b := make([]driver.Extension, n)
	lostSignals := make([]*driver.Signal, n)
	fixed := time.Duration(0) // the backend's own lease length, if it has one
	for i := range b {
		name := s.name(t, fmt.Sprint(i))
		if i == 0 {
			name += strings.Repeat("x", 1024-len(name))
		}
		req := driver.Request{Name: name, Owner: fmt.Sprintf("%032x", i+1), TTL: time.Duration(10+2*(i%2)) * ttl, Fair: s.h.Fair}
		if i == expiring {
			req.TTL = ttl
		}
		if s.caps.Semaphore && i%16 == 1 {
			req.Limit, req.Holder = 2, []byte(`{"limit":2}`)
		}
		g, err := d.Acquire(ctx, req)
		if err != nil {
			t.Fatalf("Acquire %d: %v", i, err)
		}
		// A backend with a lease length of its own grants it to every
		// lease, from the first on.
		if short := g.TTL > 0 && g.TTL < req.TTL; short || fixed != 0 {
			if i == 0 {
				fixed = g.TTL
			}
			if !short || g.TTL != fixed {
				t.Fatalf("Acquire %d granted %v for the %v asked, the first grant %v: neither the TTL asked for nor one length for all", i, g.TTL, req.TTL, b[0].TTL)
			}
			if g.Lost == nil {
				t.Fatalf("Acquire %d granted %v, not the TTL asked for (%v), and no Grant.Lost: the loss of such a lease cannot be told", i, g.TTL, req.TTL)
			}
			req.TTL = g.TTL
		}
		lostSignals[i] = g.Lost
		b[i] = driver.Extension{Held: driver.Held{Name: name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}, TTL: req.TTL}
	}
	renewAt := time.Now().Add(2 * ttl)
	defer func() {
		for _, e := range b {
			_ = d.Release(testenv.Context(t, 30*time.Second), e.Held)
		}
	}()
	lost := map[int]string{}
	for i := 2; i < len(b); i += 37 {
		if err := d.Release(ctx, b[i].Held); err != nil {
			t.Fatalf("Release %d: %v", i, err)
		}
		lost[i] = "released"
	}
	for i := 4; i < len(b)-1; i += 41 {
		if s.caps.Semaphore && i%16 == 1 {
			continue
		}
		if err := other.Break(ctx, b[i].Held.Name); err != nil {
			t.Fatalf("Break %d: %v", i, err)
		}
		l := mustLock(t, other, b[i].Held.Name)
		defer mustUnlock(t, l)
		lost[i] = "broken and taken by another owner"
	}
	stopKeeping := func() time.Time { return time.Time{} }
	if fixed != 0 {
		var keep []driver.Held
		for i, e := range b {
			if _, gone := lost[i]; !gone && i != expiring {
				keep = append(keep, e.Held)
			}
		}
		stopKeeping = keepAlive(t, d, keep, fixed)
	}
	testenv.Eventually(t, 5*max(ttl, fixed), "a lease left unrenewed to expire", func() error {
		in, err := other.Inspect(ctx, b[expiring].Held.Name)
		if err == nil && in.Held {
			err = fmt.Errorf("held, %v left", in.ExpiresIn)
		}
		return err
	})
	lost[expiring] = "expired"
	time.Sleep(time.Until(renewAt))
	var unrenewedBy time.Time // fixed: the latest deadline of a lease the batch does not renew
	if fixed != 0 {
		unrenewedBy = stopKeeping().Add(fixed)
		time.Sleep(fixed / 2)
	}

	sent := time.Now()
	errs := bx.ExtendBatch(ctx, b)
	if len(errs) != len(b) {
		t.Fatalf("ExtendBatch of %d leases answered %d", len(b), len(errs))
	}
	for i, err := range errs {
		e := b[i].Held
		if why, ok := lost[i]; ok {
			if !errors.Is(err, driver.ErrLeaseLost) {
				t.Errorf("lease %d (%s): ExtendBatch answered %v, want ErrLeaseLost", i, why, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("lease %d: ExtendBatch answered %v, want it renewed", i, err)
			continue
		}
		if fixed != 0 {
			continue // checked below, once its old deadline has passed
		}
		asked := time.Now()
		in, err := other.Inspect(ctx, e.Name)
		if err != nil {
			t.Fatal(err)
		}
		left := in.ExpiresIn
		for _, p := range in.Permits {
			if p.Token == e.Token {
				left = p.ExpiresIn
			}
		}
		// Renewed, it ends no sooner than sent + TTL; not renewed, 2 TTLs
		// sooner. One TTL of margin takes in the Inspect's round trip and
		// a backend's rounding of ExpiresIn.
		if ends, want := asked.Add(left), sent.Add(b[i].TTL-ttl); !in.Held || ends.Before(want) {
			t.Errorf("lease %d after ExtendBatch: held %v, %v left: not renewed for its TTL of %v", i, in.Held, left, b[i].TTL)
		}
	}
	if fixed != 0 {
		// Past the deadline each lease had without the batch, well before
		// sent+L: a lease the batch did not renew has been lost by now.
		time.Sleep(time.Until(unrenewedBy.Add(fixed / 6)))
		for i, e := range b {
			if _, gone := lost[i]; gone {
				continue
			}
			if lostSignals[i].Fired() {
				t.Errorf("lease %d: lost (%v) %v after the batch, past its deadline without it: not renewed for its length %v", i, lostSignals[i].Cause(), time.Since(sent), fixed)
				continue
			}
			if in, err := other.Inspect(ctx, e.Held.Name); err != nil || !in.Held || in.Token != e.Held.Token && !slices.ContainsFunc(in.Permits, func(p dlock.Permit) bool { return p.Token == e.Held.Token }) {
				t.Errorf("lease %d after ExtendBatch: held %v, token %d (want %d), error %v", i, in.Held, in.Token, e.Held.Token, err)
			}
		}
	}
	// Again, the backend now warm (a script loaded, a statement prepared):
	// the same answers.
	for i, err := range bx.ExtendBatch(ctx, b) {
		if _, gone := lost[i]; gone != errors.Is(err, driver.ErrLeaseLost) || !gone && err != nil {
			t.Errorf("lease %d (lost: %q), renewed again: ExtendBatch answered %v", i, lost[i], err)
		}
	}
	if in, err := other.Inspect(ctx, b[expiring].Held.Name); err != nil || in.Held {
		t.Errorf("the expired lease after ExtendBatch: held %v (%v left), error %v: it was renewed after it expired", in.Held, in.ExpiresIn, err)
	}
	for i, why := range lost {
		if why != "broken and taken by another owner" {
			continue
		}
		in, err := other.Inspect(ctx, b[i].Held.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !in.Held || in.Token <= b[i].Held.Token || in.ExpiresIn > 2*ttl {
			t.Errorf("lease %d's name after ExtendBatch: held %v, token %d (the stale one %d), %v left: the new holder's lease must be left alone", i, in.Held, in.Token, b[i].Held.Token, in.ExpiresIn)
		}
	}
}

// keepAlive renews the leases hs, one Extend each, every ttl/4, until the
// returned stop is called, or the test ends; stop returns the time the
// last round of renewals began: the deadline of a lease renewed no more is
// at most ttl after it.
func keepAlive(t *testing.T, d driver.Driver, hs []driver.Held, ttl time.Duration) (stop func() time.Time) {
	done := make(chan struct{})
	last := make(chan time.Time, 1)
	go func() {
		var began time.Time
		defer func() { last <- began }()
		tick := time.NewTicker(ttl / 4)
		defer tick.Stop()
		for {
			began = time.Now()
			for _, h := range hs {
				ctx, cancel := context.WithTimeout(context.Background(), ttl/2)
				err := d.Extend(ctx, h, ttl)
				cancel()
				if err != nil {
					t.Errorf("keeping the lease of %q alive: Extend: %v", h.Name, err)
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	var began time.Time
	stop = func() time.Time {
		once.Do(func() {
			close(done)
			began = <-last
		})
		return began
	}
	t.Cleanup(func() { stop() }) // a test that fails before it stops them
	return stop
}

// BenchRenewals measures a backend's renewals of many held leases, one
// request each (Extend) against batched (driver.BatchExtender), side by
// side in one run: d holds n leases, and each round renews all of them
// both ways, in turn, with at most 64 requests in flight, as the portable
// layer sends them. It reports renewals/s of each way and their ratio
// (x-batched). d must implement driver.BatchExtender.
func BenchRenewals(b *testing.B, d driver.Driver, n int) {
	bx := d.(driver.BatchExtender)
	ctx := context.Background()
	const ttl = 10 * time.Minute
	held := make([]driver.Extension, n)
	for i := range held {
		req := driver.Request{Name: fmt.Sprintf("bench/renewals/%d", i), Owner: fmt.Sprintf("%032x", i+1), TTL: ttl}
		g, err := d.Acquire(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		held[i] = driver.Extension{Held: driver.Held{Name: req.Name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}, TTL: ttl}
	}
	b.Cleanup(func() {
		for _, e := range held {
			_ = d.Release(ctx, e.Held)
		}
	})
	// renewAll renews every lease, in pieces of per leases, 64 pieces in
	// flight at once.
	renewAll := func(per int, renew func([]driver.Extension) error) time.Duration {
		start := time.Now()
		next := make(chan []driver.Extension)
		errs := make(chan error, 64)
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for p := range next {
					if err := renew(p); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		for i := 0; i < len(held); i += per {
			select {
			case next <- held[i:min(i+per, len(held))]:
			case err := <-errs:
				b.Fatal(err)
			}
		}
		close(next)
		wg.Wait()
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
		return time.Since(start)
	}
	one := func(p []driver.Extension) error { return d.Extend(ctx, p[0].Held, p[0].TTL) }
	batched := func(p []driver.Extension) error {
		for _, err := range bx.ExtendBatch(ctx, p) {
			if err != nil {
				return err
			}
		}
		return nil
	}
	var single, batch time.Duration
	for b.Loop() {
		single += renewAll(1, one)
		batch += renewAll(driver.MaxBatch, batched)
	}
	total := float64(b.N * n)
	b.ReportMetric(total/single.Seconds(), "one-by-one-renewals/s")
	b.ReportMetric(total/batch.Seconds(), "batched-renewals/s")
	b.ReportMetric(single.Seconds()/batch.Seconds(), "x-batched")
}
