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
	"github.com/dlock/dlock/internal/testenv"
)

// semaphoreTests are the semaphore's part of the contract, run on every
// backend whose Capabilities.Semaphore is true.
func (s *suite) semaphoreTests() []test {
	return []test{
		{"SemaphoreAdmitsAtMostNHolders", s.testSemaphoreBound},
		{"SemaphoreTryAcquireFindsEveryPermitHeld", s.testSemaphoreTry},
		{"SemaphoreInspectShowsEveryPermit", s.testSemaphoreInspect},
		{"SemaphoreCancelledAcquireLeavesNothingBehind", s.testSemaphoreCancel},
		{"SemaphoreLoweredLimitWaitsForHoldersAboveIt", s.testSemaphoreLowered},
		{"SemaphoreBreakFreesEveryPermit", s.testSemaphoreBreak},
		{"SemaphoreOfOnePermitIsTheMutex", s.testSemaphoreOfOne},
		{"SemaphoreDisagreeingLimitsNeverExceedTheLowerOne", s.testSemaphoreDisagree},
	}
}

func (s *suite) mustAcquire(t testing.TB, c *dlock.Client, name string, n int) *dlock.Lease {
	t.Helper()
	l, err := c.Semaphore(name, n).Acquire(testenv.Context(t, 60*time.Second))
	if err != nil {
		t.Fatalf("Semaphore(%q, %d).Acquire: %v", name, n, err)
	}
	return l
}

// Eight clients, each with its own connections, take turns at a semaphore
// of three permits: never more than three are inside at once, two or more
// are at some point (the permits are really shared), and every grant has a
// token of its own, increasing in each client's order of grants.
func (s *suite) testSemaphoreBound(t *testing.T) {
	const clients, rounds, n = 8, 5, 3
	name := s.name(t, "sem")
	var (
		inside, most atomic.Int32
		mu           sync.Mutex
		tokens       []uint64
	)
	s.eachClient(t, clients, func(i int, c *dlock.Client) error {
		var last uint64
		for range rounds {
			err := c.DoLimited(testenv.Context(t, 120*time.Second), name, n, func(ctx context.Context, l *dlock.Lease) error {
				k := inside.Add(1)
				defer inside.Add(-1)
				for m := most.Load(); k > m && !most.CompareAndSwap(m, k); m = most.Load() {
				}
				if k > n {
					return fmt.Errorf("%d holders of a semaphore of %d permits at once", k, n)
				}
				if l.Token() <= last {
					return fmt.Errorf("client %d: token %d after its own %d", i, l.Token(), last)
				}
				last = l.Token()
				mu.Lock()
				tokens = append(tokens, l.Token())
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	t.Logf("%d grants, at most %d holders at once", len(tokens), most.Load())
	if most.Load() < 2 {
		t.Errorf("at most %d holder at once among %d clients: the %d permits were not shared", most.Load(), clients, n)
	}
	slices.Sort(tokens)
	if distinct := len(slices.Compact(slices.Clone(tokens))); distinct != len(tokens) {
		t.Errorf("%d grants had only %d distinct tokens: every permit's grant needs a token of its own", len(tokens), distinct)
	}
}

// With every permit held, TryAcquire returns ErrNotAcquired; once one is
// released, it is granted, with a token above every earlier grant's.
func (s *suite) testSemaphoreTry(t *testing.T) {
	const n = 3
	name := s.name(t, "sem")
	c, other := s.client(t), s.client(t)
	var held []*dlock.Lease
	for range n {
		held = append(held, s.mustAcquire(t, c, name, n))
	}
	ctx := testenv.Context(t, 30*time.Second)
	if l, err := other.Semaphore(name, n).TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire with all %d permits held: got %v (lease %v), want ErrNotAcquired", n, err, l)
	}
	top := held[n-1].Token()
	mustUnlock(t, held[0])
	l, err := other.Semaphore(name, n).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after a permit was released: %v", err)
	}
	if l.Token() <= top {
		t.Errorf("token %d after a grant with %d", l.Token(), top)
	}
	for _, h := range append(held[1:], l) {
		select {
		case <-h.Done():
			t.Errorf("permit %d lost: %v", h.Token(), h.Err())
		default:
		}
		mustUnlock(t, h)
	}
}

// Inspect of a semaphore lists every permit holder, in grant order, with
// its token, its metadata (the number of permits included) and its expiry.
func (s *suite) testSemaphoreInspect(t *testing.T) {
	const n = 3
	name := s.name(t, "sem")
	c := s.client(t, dlock.WithNote("permit holder"))
	var held []*dlock.Lease
	for range 2 {
		held = append(held, s.mustAcquire(t, c, name, n))
	}
	in, err := s.client(t).Inspect(testenv.Context(t, 30*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Held || in.Token != held[0].Token() || len(in.Permits) != len(held) {
		t.Fatalf("Inspect = %+v; want held, token %d, %d permits", in, held[0].Token(), len(held))
	}
	for i, p := range in.Permits {
		if p.Token != held[i].Token() || p.Holder.Limit != n || p.Holder.Note != "permit holder" {
			t.Errorf("permit %d = %+v; want token %d, limit %d, the holder's note", i, p, held[i].Token(), n)
		}
		if p.ExpiresIn > s.h.ttl() {
			t.Errorf("permit %d expires in %v, more than its TTL %v", i, p.ExpiresIn, s.h.ttl())
		}
	}
	infos, err := c.List(testenv.Context(t, 30*time.Second), name)
	if err != nil || len(infos) != 1 || len(infos[0].Permits) != len(held) {
		t.Errorf("List(%q) = %+v, %v; want the semaphore with %d permits", name, infos, err, len(held))
	}
	for _, l := range held {
		mustUnlock(t, l)
	}
}

// Waiters for a semaphore whose permits are all held give up (their
// contexts end): when the holders release, every permit is free at once,
// and stays free of them: none of the waiters that gave up is granted one.
func (s *suite) testSemaphoreCancel(t *testing.T) {
	const n = 2
	name := s.name(t, "sem")
	c := s.client(t)
	held := []*dlock.Lease{s.mustAcquire(t, c, name, n), s.mustAcquire(t, c, name, n)}
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(100*(i+1))*time.Millisecond)
			defer cancel()
			if l, err := s.client(t).Semaphore(name, n).Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("waiter %d: got %v (lease %v), want context.DeadlineExceeded", i, err, l)
			}
		}()
	}
	wg.Wait()
	for _, l := range held {
		mustUnlock(t, l)
	}
	other := s.client(t)
	for round := range 3 {
		var got []*dlock.Lease
		for k := range n {
			l, err := other.Semaphore(name, n).TryAcquire(testenv.Context(t, 30*time.Second))
			if err != nil {
				in, _ := other.Inspect(testenv.Context(t, 30*time.Second), name)
				t.Fatalf("round %d: TryAcquire %d of %d after the holders released and every waiter gave up: %v (state: %+v)", round+1, k+1, n, err, in)
			}
			got = append(got, l)
		}
		for _, l := range got {
			mustUnlock(t, l)
		}
		time.Sleep(100 * time.Millisecond) // a late grant to a ghost shows at the next round
	}
}

// The limit lowered while permits are held: holders above the new limit
// keep their leases, and a client asking with the lower limit is granted
// only once fewer than it are held.
func (s *suite) testSemaphoreLowered(t *testing.T) {
	name := s.name(t, "sem")
	c, lower := s.client(t), s.client(t)
	held := []*dlock.Lease{s.mustAcquire(t, c, name, 3), s.mustAcquire(t, c, name, 3), s.mustAcquire(t, c, name, 3)}
	ctx := testenv.Context(t, 30*time.Second)
	try := func(want error) {
		t.Helper()
		l, err := lower.Semaphore(name, 2).TryAcquire(ctx)
		if !errors.Is(err, want) {
			t.Fatalf("TryAcquire with 2 permits: got %v, want %v", err, want)
		}
		if l != nil {
			mustUnlock(t, l)
		}
	}
	try(dlock.ErrNotAcquired) // three held
	mustUnlock(t, held[0])
	try(dlock.ErrNotAcquired) // two held: not fewer than 2
	mustUnlock(t, held[1])
	try(nil) // one held
	select {
	case <-held[2].Done():
		t.Errorf("the holder above the lowered limit lost its permit: %v", held[2].Err())
	default:
	}
	mustUnlock(t, held[2])
}

// Break of a semaphore frees every permit: each holder learns of its loss,
// and the next grant has a token above all of theirs.
func (s *suite) testSemaphoreBreak(t *testing.T) {
	const n = 3
	name := s.name(t, "sem")
	c := s.client(t)
	held := []*dlock.Lease{s.mustAcquire(t, c, name, n), s.mustAcquire(t, c, name, n)}
	if err := s.client(t).Break(testenv.Context(t, 30*time.Second), name); err != nil {
		t.Fatalf("Break: %v", err)
	}
	for _, l := range held {
		select {
		case <-l.Done():
		case <-time.After(s.h.ttl() + 5*time.Second):
			t.Fatalf("permit %d: Done not closed %v after Break", l.Token(), s.h.ttl()+5*time.Second)
		}
	}
	l := s.mustAcquire(t, s.client(t), name, n)
	if l.Token() <= held[1].Token() {
		t.Errorf("token after Break %d, want > %d", l.Token(), held[1].Token())
	}
	mustUnlock(t, l)
}

// A semaphore of one permit and the mutex of the same name are one lock.
func (s *suite) testSemaphoreOfOne(t *testing.T) {
	name := s.name(t, "l")
	c, other := s.client(t), s.client(t)
	l := s.mustAcquire(t, c, name, 1)
	if _, err := other.Mutex(name).TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock of the mutex while its semaphore of one permit is held: got %v, want ErrNotAcquired", err)
	}
	mustUnlock(t, l)
}

// testSemaphoreUnsupported runs where Capabilities.Semaphore is false:
// asking for more than one permit is ErrUnsupported, before any I/O, and a
// semaphore of one permit is still the mutex.
func (s *suite) testSemaphoreUnsupported(t *testing.T) {
	c := s.client(t)
	if l, err := c.Semaphore(s.name(t, "sem"), 3).Acquire(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("Semaphore of 3 on a backend without semaphores: got %v (lease %v), want ErrUnsupported", err, l)
	}
	s.testSemaphoreOfOne(t)
}

// A process holding one of two permits is killed while another holds the
// second: its permit is free within the TTL (before half of it on session
// backends), the other permit is untouched, and the permit granted next
// has a token above both.
func (s *suite) testSemaphoreCrash(t *testing.T) {
	const n = 2
	name := s.name(t, "sem")
	ttl := s.crashTTL()
	cmd, tok := StartPermitHolder(t, s.h.URL, name, n, ttl)
	c := s.client(t)
	mine := s.mustAcquire(t, c, name, n)
	if _, err := c.Semaphore(name, n).TryAcquire(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while another process and this one hold both permits: got %v, want ErrNotAcquired", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), ttl+20*time.Second)
	defer cancel()
	l, err := s.client(t).Semaphore(name, n).Acquire(ctx)
	if err != nil {
		t.Fatalf("the crashed holder's permit was not freed within its TTL %v (+20s): %v", ttl, err)
	}
	s.freedInTime(t, "permit", killed, ttl)
	if l.Token() <= max(tok, mine.Token()) {
		t.Errorf("token after the crash %d, want > %d and > %d", l.Token(), tok, mine.Token())
	}
	select {
	case <-mine.Done():
		t.Errorf("the other permit was lost: %v", mine.Err())
	default:
	}
	mustUnlock(t, l)
	mustUnlock(t, mine)
}

// crashTTL is the lease length of a child process that a test kills: the
// harness's, or on a session backend one long enough that only the end of
// the session can free the lease as soon as the test expects.
func (s *suite) crashTTL() time.Duration {
	if s.caps.Sessions {
		return max(30*time.Second, 3*s.caps.MinTTL)
	}
	return s.h.ttl()
}

// freedInTime logs how long after the kill at killed the what of a
// crashed holder was granted again, and fails the test if a session
// backend took half the TTL or more (a lease-only backend's bound, the
// TTL, is the caller's context).
func (s *suite) freedInTime(t *testing.T, what string, killed time.Time, ttl time.Duration) {
	t.Helper()
	freed := time.Since(killed)
	t.Logf("%s freed %v after its holder was killed (TTL %v, sessions: %v)", what, freed.Round(time.Millisecond), ttl, s.caps.Sessions)
	if s.caps.Sessions && freed >= ttl/2 {
		t.Errorf("the killed holder's %s was freed %v after the kill, not before half its TTL %v", what, freed, ttl)
	}
}

// Clients disagree on the limit: two permits are held under a limit of 5,
// W waits under a limit of 2, X then asks under a limit of 5, and one of
// the first two is released. A backend may grant X at once (no queue) or
// make it wait behind W (a queue), but W must not be granted while two
// others hold: once X got in before the release, W waits on.
func (s *suite) testSemaphoreDisagree(t *testing.T) {
	name := s.name(t, "sem")
	c := s.client(t)
	a, b := s.mustAcquire(t, c, name, 5), s.mustAcquire(t, c, name, 5)
	ctx, cancel := context.WithCancel(testenv.Context(t, 60*time.Second))
	defer cancel()
	type grant struct {
		l  *dlock.Lease
		at time.Time
	}
	acquire := func(n int) chan grant {
		ch := make(chan grant, 1)
		cl := s.client(t)
		go func() {
			l, err := cl.Semaphore(name, n).Acquire(ctx)
			if err != nil && ctx.Err() == nil {
				t.Errorf("Acquire with %d permits: %v", n, err)
			}
			ch <- grant{l, time.Now()}
		}()
		return ch
	}
	wc := acquire(2)
	time.Sleep(500 * time.Millisecond) // W queues first
	xc := acquire(5)
	time.Sleep(500 * time.Millisecond)
	released := time.Now()
	mustUnlock(t, a)
	// Each channel is read once: wc and xc are nil once read (a failed
	// Acquire sends a grant without a lease).
	var w, x grant
	deadline := time.After(5 * time.Second)
	for wc != nil || xc != nil {
		select {
		case w = <-wc:
			wc = nil
		case x = <-xc:
			xc = nil
		case <-deadline:
			cancel()
			if wc != nil {
				w, wc = <-wc, nil
			}
			if xc != nil {
				x, xc = <-xc, nil
			}
		}
	}
	// X granted before the release means B and X held from then on (they
	// release only below): W must not be granted in the window.
	if w.l != nil && x.l != nil && x.at.Before(released) {
		t.Errorf("the client asking with 2 permits was granted (token %d) while the other two held (tokens %d and %d)", w.l.Token(), b.Token(), x.l.Token())
	}
	for _, l := range []*dlock.Lease{b, w.l, x.l} {
		if l != nil {
			mustUnlock(t, l)
		}
	}
}
