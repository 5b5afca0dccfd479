package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// Run runs the conformance suite against the backend behind h. Each test
// uses lock names of its own, so the deployment may be shared.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Open == nil {
		t.Fatal("dlocktest: Harness.Open is nil")
	}
	s := &suite{h: &h, prefix: fmt.Sprintf("dlocktest-%d/", time.Now().UnixNano())}
	probe := s.driver(t)
	s.caps = probe.Capabilities()
	if s.h.Fair && !s.caps.Fair {
		t.Fatal("dlocktest: Harness.Fair set, but the backend's Capabilities.Fair is false")
	}
	if s.caps.DurableFencing && h.Restart == nil && !s.caps.InProcess {
		t.Fatal("dlocktest: the backend claims DurableFencing; the harness must provide Restart so the claim is checked")
	}

	// The tests use names of their own, so most run in parallel; the ones
	// that cut traffic or restart servers run alone afterwards, so that a
	// busy machine cannot blur what they measure.
	parallel := []test{
		{"BadInputGetsItsError", s.testBadInput},
		{"NamesAreExactAndIndependent", s.testNames},
		{"TryLockFindsItHeld", s.testTryLock},
		{"ExclusionUnderContention", s.testExclusion},
		{"RenewalKeepsLeaseBeyondTTL", s.testRenewal},
		{"TokensIncreaseAcrossRelease", s.testTokensRelease},
		{"ExpiryFreesLockAndStaleOwnerIsRefused", s.testExpiry},
		{"BreakGivesNextHolderHigherToken", s.testBreak},
		{"CancelledLockLeavesNothingBehind", s.testCancel},
		{"InspectAndListShowHolder", s.testInspect},
		{"DoReleasesLockWhenFnPanics", s.testDoPanic},
		{"UnlockWithEndedContextReleases", s.testUnlockEndedCtx},
		{"UnlockOfBrokenLeaseReportsLoss", s.testUnlockLost},
		{"DotNamesAreLocksOfTheirOwn", s.testDotNames},
		{"LockDelayFollowsALostHolder", s.testLockDelay},
		{"StaleOwnerIsRefusedAfterBreak", s.testStaleAfterBreak},
		{"RenewalRunsEveryThirdOfTheTTL", s.testRenewalRate},
		{"MinTTLIsGrantedAndShorterRefused", s.testMinTTL},
	}
	// A backend that claims Fair has its FIFO tests run whatever the
	// harness says (they ask for fair waiting themselves): Harness.Fair
	// only adds fair waiting to the rest of the suite, and cannot hide
	// the claim from the suite.
	if s.caps.Fair {
		parallel = append(parallel,
			test{"FairWaitersAreGrantedInArrivalOrder", s.testFIFO},
			test{"FairQueueSkipsWaiterThatGaveUp", s.testFairCancel})
	}
	if _, ok := probe.(driver.BatchExtender); ok {
		parallel = append(parallel, test{"BatchRenewalRenewsEachLeaseAndReportsEachLoss", s.testBatchRenewal})
	}
	if s.caps.Semaphore {
		parallel = append(parallel, s.semaphoreTests()...)
	} else {
		parallel = append(parallel, test{"SemaphoreIsUnsupportedAndSaysSo", s.testSemaphoreUnsupported})
	}
	parallel = append(parallel, s.electionTests()...)
	if s.caps.RWMutex {
		parallel = append(parallel, s.rwTests()...)
	} else {
		parallel = append(parallel, test{"RWMutexIsUnsupportedAndSaysSo", s.testRWUnsupported})
	}
	if !s.caps.InProcess {
		if h.URL == "" {
			t.Fatal("dlocktest: Harness.URL is empty; the crash tests need it")
		}
		parallel = append(parallel, test{"CrashedHolderFreesLockWithinTTL", s.testCrash})
		if s.caps.Semaphore {
			parallel = append(parallel, test{"SemaphoreCrashedHolderFreesPermitWithinTTL", s.testSemaphoreCrash})
		}
		if s.caps.RWMutex {
			parallel = append(parallel, test{"RWMutexCrashedReaderFreesLockWithinTTL", s.testRWCrashedReader})
		}
		parallel = append(parallel, test{"ElectionCrashedLeaderIsReplacedWithinTTL", s.testElectionCrashedLeader})
	}
	t.Run("Contract", func(t *testing.T) {
		for _, tc := range parallel {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.fn(t)
			})
		}
	})
	trafficTests := []test{
		{"PartitionedHolderSeesLossBeforeOthersAcquire", s.testPartition},
		{"FrozenBackendNeverHangsACall", s.testFrozen},
		{"LeaseDeadlineCountsFromSendTime", s.testSendTime},
	}
	if s.caps.Sessions {
		trafficTests = append(trafficTests, test{"StaleOwnerIsRefusedAfterItsSessionEnded", s.testStaleAfterSession})
	}
	if len(h.Endpoints) > 0 {
		for _, tc := range trafficTests {
			t.Run(tc.name, tc.fn)
		}
	} else if !s.caps.InProcess {
		var names []string
		for _, tc := range trafficTests {
			names = append(names, tc.name)
		}
		msg := fmt.Sprintf("dlocktest: Harness.Endpoints is empty: NOT RUN on this backend: %s", strings.Join(names, ", "))
		switch {
		case h.NoEndpointsReason != "":
			t.Logf("%s (reason given by the harness: %s)", msg, h.NoEndpointsReason)
		case testenv.Required("dlocktest-endpoints"):
			t.Errorf("DLOCK_REQUIRE=%s: %s; give Endpoints, or set Harness.NoEndpointsReason", os.Getenv("DLOCK_REQUIRE"), msg)
		default:
			t.Logf("WARNING %s; give Endpoints, or set Harness.NoEndpointsReason", msg)
		}
	}
	if h.Restart != nil {
		t.Run("TokensIncreaseAcrossServerRestart", s.testRestart)
	}
}

// test is one test of the suite.
type test struct {
	name string
	fn   func(*testing.T)
}

type suite struct {
	h      *Harness
	caps   driver.Capabilities
	prefix string
}

func (s *suite) name(t *testing.T, suffix string) string {
	return s.prefix + strings.ReplaceAll(t.Name(), "/", "_") + "/" + suffix
}

// driver opens an independent driver, closed when t ends.
func (s *suite) driver(t testing.TB) driver.Driver {
	return s.driverAt(t, nil)
}

func (s *suite) driverAt(t testing.TB, addrs []string) driver.Driver {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, err := s.h.Open(ctx, addrs)
	if err != nil {
		t.Fatalf("Harness.Open: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// client opens an independent dlock client with the suite's options.
func (s *suite) client(t testing.TB, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	return dlock.New(s.driver(t), s.opts(opts...)...)
}

func (s *suite) opts(extra ...dlock.Option) []dlock.Option {
	o := []dlock.Option{dlock.WithTTL(s.h.ttl())}
	if s.h.Fair {
		o = append(o, dlock.WithFair())
	}
	return append(o, extra...)
}

func mustLock(t testing.TB, c *dlock.Client, name string, opts ...dlock.Option) *dlock.Lease {
	t.Helper()
	l, err := c.Mutex(name, opts...).Lock(testenv.Context(t, 60*time.Second))
	if err != nil {
		t.Fatalf("Lock(%q): %v", name, err)
	}
	return l
}

func mustUnlock(t testing.TB, l *dlock.Lease) {
	t.Helper()
	if err := l.Unlock(testenv.Context(t, 30*time.Second)); err != nil {
		t.Fatalf("Unlock(%q): %v", l.Name(), err)
	}
}

func (s *suite) testBadInput(t *testing.T) {
	c := s.client(t)
	ctx := testenv.Context(t, 30*time.Second)
	for _, tc := range []struct{ desc, name string }{
		{"empty", ""},
		{"1025 bytes", strings.Repeat("x", 1025)},
		{"invalid UTF-8", "bad\xff\xfename"},
	} {
		if _, err := c.Mutex(tc.name).TryLock(ctx); !errors.Is(err, dlock.ErrInvalidName) {
			t.Errorf("TryLock with %s name: got %v, want ErrInvalidName", tc.desc, err)
		}
		if _, err := c.Mutex(tc.name).Lock(ctx); !errors.Is(err, dlock.ErrInvalidName) {
			t.Errorf("Lock with %s name: got %v, want ErrInvalidName", tc.desc, err)
		}
		if _, err := c.Inspect(ctx, tc.name); !errors.Is(err, dlock.ErrInvalidName) {
			t.Errorf("Inspect with %s name: got %v, want ErrInvalidName", tc.desc, err)
		}
		if err := c.Break(ctx, tc.name); !errors.Is(err, dlock.ErrInvalidName) {
			t.Errorf("Break with %s name: got %v, want ErrInvalidName", tc.desc, err)
		}
	}
	name := s.name(t, "opts")
	for _, tc := range []struct {
		desc string
		opt  dlock.Option
		want error
	}{
		{"zero TTL", dlock.WithTTL(0), dlock.ErrInvalidOption},
		{"negative TTL", dlock.WithTTL(-time.Second), dlock.ErrInvalidOption},
		{"negative lock-delay", dlock.WithLockDelay(-1), dlock.ErrInvalidOption},
		{"oversized note", dlock.WithNote(strings.Repeat("n", 2000)), dlock.ErrInvalidOption},
	} {
		_, err := c.Mutex(name, tc.opt).TryLock(ctx)
		if !errors.Is(err, tc.want) {
			t.Errorf("TryLock with %s: got %v, want %v", tc.desc, err, tc.want)
		} else if !strings.Contains(err.Error(), "With") {
			t.Errorf("TryLock with %s: error %q does not name the option", tc.desc, err)
		}
	}
	if err := c.Do(ctx, name, nil); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("Do with nil fn: got %v, want ErrInvalidOption", err)
	}
	if err := c.Break(ctx, s.name(t, "never-held")); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Break of a free lock: got %v, want ErrNotHeld", err)
	}
	l := mustLock(t, c, name)
	mustUnlock(t, l)
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Unlock: got %v, want ErrNotHeld", err)
	}
	if !errors.Is(l.Err(), dlock.ErrNotHeld) {
		t.Errorf("Err after Unlock: got %v, want ErrNotHeld", l.Err())
	}
	select {
	case <-l.Done():
	default:
		t.Error("Done not closed after Unlock")
	}
}

// testNames checks that awkward names are locks of their own: none of them
// collides with another after the backend's escaping or hashing.
func (s *suite) testNames(t *testing.T) {
	c1, c2 := s.client(t), s.client(t)
	base := s.name(t, "")
	names := []string{
		"a", "A", "a/b", "a/b/", "a//b", "/a", "a\x00", "a\x00b", "a b", "a'b", `a"b`, "a\\b",
		"a;DROP TABLE x;--", "a%2Fb", "a*", "a?", "a{b}", "a[b]", "..", ".", "ключ", "锁/秒杀",
		"🔒", strings.Repeat("z", 1024-len(base)), strings.Repeat("z", 1023-len(base)),
	}
	var leases []*dlock.Lease
	for _, n := range names {
		n = base + n
		if len(n) > dlock.MaxNameLen {
			t.Fatalf("test name too long: %d", len(n))
		}
		l, err := c1.Mutex(n).TryLock(testenv.Context(t, 30*time.Second))
		if err != nil {
			t.Fatalf("TryLock(%q): %v (a different name already took it: collision?)", n, err)
		}
		leases = append(leases, l)
		if _, err := c2.Mutex(n).TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("second TryLock(%q) by another client: got %v, want ErrNotAcquired", n, err)
		}
	}
	for _, l := range leases {
		in, err := c2.Inspect(testenv.Context(t, 30*time.Second), l.Name())
		if err != nil {
			t.Fatalf("Inspect(%q): %v", l.Name(), err)
		}
		if !in.Held || in.Token != l.Token() {
			t.Errorf("Inspect(%q): held=%v token=%d, want held with token %d", l.Name(), in.Held, in.Token, l.Token())
		}
		mustUnlock(t, l)
	}
}

func (s *suite) testTryLock(t *testing.T) {
	c1, c2 := s.client(t), s.client(t)
	name := s.name(t, "l")
	l := mustLock(t, c1, name)
	if _, err := c2.Mutex(name).TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of a held lock: got %v, want ErrNotAcquired", err)
	}
	// The holder itself gets no re-entrant grant either.
	if _, err := c1.Mutex(name).TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock by the holder's own client: got %v, want ErrNotAcquired", err)
	}
	mustUnlock(t, l)
	l2, err := c2.Mutex(name).TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatalf("TryLock after release: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token after release %d, want > %d", l2.Token(), l.Token())
	}
	mustUnlock(t, l2)
}

// eachClient runs f for n clients, each with connections of its own (as
// n processes would have), all at once, and fails the test with each
// error that f returns.
func (s *suite) eachClient(t *testing.T, n int, f func(i int, c *dlock.Client) error) {
	t.Helper()
	cs := make([]*dlock.Client, n)
	for i := range cs {
		cs[i] = s.client(t)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for i, c := range cs {
		wg.Go(func() {
			<-start
			if err := f(i, c); err != nil {
				errs <- err
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// testExclusion has 8 independent clients increment a shared counter with
// a read–sleep–write window under the lock: a single lost update, or two
// clients inside at once, or a token out of order, fails.
func (s *suite) testExclusion(t *testing.T) {
	const clients, rounds = 8, 6
	name := s.name(t, "counter")
	var (
		counter int64
		inside  atomic.Int32
		mu      sync.Mutex
		tokens  []uint64
	)
	s.eachClient(t, clients, func(_ int, c *dlock.Client) error {
		for range rounds {
			err := c.Do(testenv.Context(t, 120*time.Second), name, func(ctx context.Context, l *dlock.Lease) error {
				if n := inside.Add(1); n != 1 {
					return fmt.Errorf("%d holders inside the critical section at once", n)
				}
				defer inside.Add(-1)
				mu.Lock()
				tokens = append(tokens, l.Token())
				mu.Unlock()
				v := atomic.LoadInt64(&counter)
				time.Sleep(2 * time.Millisecond)
				atomic.StoreInt64(&counter, v+1)
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if counter != clients*rounds {
		t.Errorf("counter = %d after %d increments: lost updates", counter, clients*rounds)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("grant %d has token %d after %d: tokens must strictly increase", i, tokens[i], tokens[i-1])
		}
	}
}

// testRenewal holds a lock for three TTLs; renewal must keep it.
func (s *suite) testRenewal(t *testing.T) {
	c1, c2 := s.client(t), s.client(t)
	name := s.name(t, "l")
	l := mustLock(t, c1, name)
	end := time.Now().Add(3 * s.h.ttl())
	for time.Now().Before(end) {
		if _, err := c2.Mutex(name).TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock while renewed: got %v, want ErrNotAcquired", err)
		}
		select {
		case <-l.Done():
			t.Fatalf("lease ended while renewed: %v", l.Err())
		case <-time.After(s.h.ttl() / 4):
		}
	}
	mustUnlock(t, l)
}

func (s *suite) testTokensRelease(t *testing.T) {
	cs := []*dlock.Client{s.client(t), s.client(t), s.client(t)}
	name := s.name(t, "l")
	var last uint64
	for i := range 9 {
		l := mustLock(t, cs[i%3], name)
		if l.Token() <= last {
			t.Fatalf("grant %d: token %d, want > %d", i, l.Token(), last)
		}
		last = l.Token()
		mustUnlock(t, l)
	}
}

// testExpiry takes a lock through the driver and never renews it: the lock
// must free itself after the TTL, the next grant must have a higher token,
// and the stale owner can neither extend nor release the new holder's lock.
func (s *suite) testExpiry(t *testing.T) {
	d := s.driver(t)
	name := s.name(t, "l")
	ttl := s.h.ttl()
	req := driver.Request{Name: name, Owner: strings.Repeat("ab", 16), TTL: ttl, Fair: s.h.Fair}
	requested := time.Now()
	g, err := d.Acquire(testenv.Context(t, 30*time.Second), req)
	if err != nil {
		t.Fatalf("driver Acquire: %v", err)
	}
	if g.TTL > 0 {
		ttl = g.TTL
	}
	stale := driver.Held{Name: name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}
	if s.caps.Sessions {
		// A session keeps the lock while the session lives; end it.
		_ = d.Close()
	}

	c := s.client(t)
	l := mustLock(t, c, name)
	sinceRequest := time.Since(requested)
	if l.Token() <= g.Token {
		t.Errorf("token after expiry %d, want > %d", l.Token(), g.Token)
	}
	// The expired holder could count on its lease until the send time of
	// its request plus the TTL, less the portable layer's drift margin
	// (1%): nobody may be granted the lock before. 2% leaves room for
	// timer granularity.
	if earliest := ttl - ttl/50; !s.caps.Sessions && sinceRequest < earliest {
		t.Errorf("granted %v after the expired lease was requested, before its TTL %v had run out (at least %v)", sinceRequest, ttl, earliest)
	}
	if !s.caps.Sessions {
		if err := d.Extend(testenv.Context(t, 30*time.Second), stale, ttl); !errors.Is(err, driver.ErrLeaseLost) {
			t.Errorf("stale Extend: got %v, want ErrLeaseLost", err)
		}
		if err := d.Release(testenv.Context(t, 30*time.Second), stale); !errors.Is(err, driver.ErrLeaseLost) {
			t.Errorf("stale Release: got %v, want ErrLeaseLost", err)
		}
	}
	if _, err := s.client(t).Mutex(name).TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("after a stale Release the new holder's lock must still be held; TryLock got %v", err)
	}
	select {
	case <-l.Done():
		t.Errorf("new holder lost its lease: %v", l.Err())
	default:
	}
	mustUnlock(t, l)
}

// testBreak breaks a held lock: the holder sees the loss (Done, Do's
// context), its Unlock reports it, and the next grant has a higher token.
func (s *suite) testBreak(t *testing.T) {
	holder, admin, next := s.client(t), s.client(t), s.client(t)
	name := s.name(t, "l")
	granted := make(chan *dlock.Lease, 1)
	doErr := make(chan error, 1)
	var fnCause error // why fn's context ended; read after doErr
	go func() {
		doErr <- holder.Do(testenv.Context(t, 120*time.Second), name, func(ctx context.Context, l *dlock.Lease) error {
			granted <- l
			<-ctx.Done() // work until the lease is lost
			fnCause = context.Cause(ctx)
			return nil
		})
	}()
	var l *dlock.Lease
	select {
	case l = <-granted:
	case err := <-doErr:
		t.Fatalf("Do: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("Do was not granted a free lock within 60s")
	}
	if err := admin.Break(testenv.Context(t, 30*time.Second), name); err != nil {
		t.Fatalf("Break: %v", err)
	}
	l2 := mustLock(t, next, name)
	if l2.Token() <= l.Token() {
		t.Errorf("token after Break %d, want > %d", l2.Token(), l.Token())
	}
	select {
	case err := <-doErr:
		if !errors.Is(err, dlock.ErrLeaseLost) {
			t.Errorf("Do after Break returned %v, want an error wrapping ErrLeaseLost", err)
		}
		if !errors.Is(fnCause, dlock.ErrLeaseLost) {
			t.Errorf("Do's context ended with cause %v, want the lease's loss (ErrLeaseLost)", fnCause)
		}
	case <-time.After(s.h.ttl() + 30*time.Second):
		t.Fatal("the broken holder's Do context was not cancelled")
	}
	if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
		t.Errorf("broken lease Err = %v, want ErrLeaseLost", l.Err())
	}
	// The holder learns of the break before its deadline (at a renewal, or
	// from its watch), which is how it tells a break from an expiry.
	if got := dlock.LossCause(l.Err()); got != dlock.LossBroken {
		t.Errorf("LossCause of a broken lease = %q, want %q (%v)", got, dlock.LossBroken, l.Err())
	}
	if _, err := holder.Mutex(name).TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("the new holder's lock must still be held after the broken holder's Do released; TryLock got %v", err)
	}
	mustUnlock(t, l2)
}

// testDoPanic panics in Do's fn: the panic reaches Do's caller with its
// own value, and the lock is free at once afterwards.
func (s *suite) testDoPanic(t *testing.T) {
	c, other := s.client(t), s.client(t)
	name := s.name(t, "l")
	type boom struct{ name string }
	got := func() (v any) {
		defer func() { v = recover() }()
		_ = c.Do(testenv.Context(t, 60*time.Second), name, func(context.Context, *dlock.Lease) error {
			panic(boom{name})
		})
		return nil
	}()
	if got != (boom{name}) {
		t.Fatalf("recovered %v from Do, want the fn's own panic value", got)
	}
	l, err := other.Mutex(name).TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatalf("TryLock after Do's fn panicked: %v; the panic left the lock held", err)
	}
	mustUnlock(t, l)
}

// testUnlockEndedCtx releases with a context that has already ended, as
// defer l.Unlock(requestCtx) does, and from a Do whose context ended while
// fn ran: the release must still be made, and the lock be free at once.
func (s *suite) testUnlockEndedCtx(t *testing.T) {
	c, other := s.client(t), s.client(t)
	name := s.name(t, "l")
	l := mustLock(t, c, name)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Unlock(ended); err != nil {
		t.Fatalf("Unlock with an ended context: %v", err)
	}
	if !errors.Is(l.Err(), dlock.ErrNotHeld) {
		t.Errorf("Err after Unlock = %v, want ErrNotHeld", l.Err())
	}
	l2, err := other.Mutex(name).TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatalf("TryLock after Unlock with an ended context: %v; the lock was not released", err)
	}
	mustUnlock(t, l2)

	ctx, cancel := context.WithCancel(testenv.Context(t, 60*time.Second))
	defer cancel()
	err = c.Do(ctx, name, func(context.Context, *dlock.Lease) error {
		cancel() // the caller gives up while fn runs
		return nil
	})
	if err != nil {
		t.Fatalf("Do whose context ended while fn ran: %v", err)
	}
	l3, err := other.Mutex(name).TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatalf("TryLock after Do whose context ended: %v; the lock was not released", err)
	}
	mustUnlock(t, l3)
}

// testUnlockLost breaks held locks: Unlock of the broken lease returns
// ErrLeaseLost, whether or not the holder had noticed the loss, and does
// not free the next holder's lock.
func (s *suite) testUnlockLost(t *testing.T) {
	holder, admin, next := s.client(t), s.client(t), s.client(t)
	for _, noticed := range []bool{false, true} {
		name := s.name(t, fmt.Sprintf("noticed=%v", noticed))
		l := mustLock(t, holder, name)
		if err := admin.Break(testenv.Context(t, 30*time.Second), name); err != nil {
			t.Fatalf("Break: %v", err)
		}
		l2 := mustLock(t, next, name)
		if noticed {
			select {
			case <-l.Done():
			case <-time.After(s.h.ttl() + 30*time.Second):
				t.Fatalf("the broken lease's Done did not close")
			}
		}
		if err := l.Unlock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrLeaseLost) {
			t.Errorf("Unlock of a broken lease (loss noticed: %v): got %v, want ErrLeaseLost", noticed, err)
		}
		if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
			t.Errorf("broken lease Err after Unlock (loss noticed: %v) = %v, want ErrLeaseLost", noticed, l.Err())
		}
		if _, err := admin.Mutex(name).TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("after Unlock of the broken lease the next holder's lock must still be held; TryLock got %v", err)
		}
		mustUnlock(t, l2)
	}
}

// testDotNames uses "." and ".." and their neighbours as whole lock names,
// not under the suite's prefix, where a backend that maps names to paths
// could resolve them: each must be a lock of its own. Lock (not TryLock)
// takes them, so that suites sharing the deployment only wait for each
// other; two names that collide make the second Lock run out of time.
func (s *suite) testDotNames(t *testing.T) {
	c, other := s.client(t), s.client(t)
	var leases []*dlock.Lease
	defer func() {
		for _, l := range leases {
			_ = l.Unlock(testenv.Context(t, 30*time.Second))
		}
	}()
	for _, n := range []string{".", "..", "...", "/", "./", "/.", "../", "/..", "./.", "%2E", "%2E%2E"} {
		l, err := c.Mutex(n).Lock(testenv.Context(t, 30*time.Second))
		if err != nil {
			t.Fatalf("Lock(%q) while holding %d other dot names: %v (collision with one of them?)", n, len(leases), err)
		}
		leases = append(leases, l)
		if _, err := other.Mutex(n).TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock(%q) by another client while held: got %v, want ErrNotAcquired", n, err)
		}
		in, err := other.Inspect(testenv.Context(t, 30*time.Second), n)
		if err != nil {
			t.Fatalf("Inspect(%q): %v", n, err)
		}
		if !in.Held || in.Token != l.Token() {
			t.Errorf("Inspect(%q): held=%v token=%d, want held with token %d", n, in.Held, in.Token, l.Token())
		}
	}
	for _, l := range leases {
		mustUnlock(t, l)
	}
	leases = nil
}

// testLockDelay checks WithLockDelay on the backend: after a Break, Lock
// waits out the delay (a Lock whose context ends during it returns the
// context's error and leaves the lock free); where the backend reports
// Grant.Recovered (Capabilities.LockDelay), it does so exactly after a
// loss, and a cleanly released lock is handed over without the delay.
func (s *suite) testLockDelay(t *testing.T) {
	c, admin := s.client(t), s.client(t)
	name := s.name(t, "l")
	if s.caps.LockDelay {
		d := s.driver(t)
		owner := func(b byte) string { return strings.Repeat(fmt.Sprintf("%02x", b), 16) }
		grant := func(o string) (driver.Grant, driver.Held) {
			t.Helper()
			g, err := d.Acquire(testenv.Context(t, 30*time.Second), driver.Request{Name: name, Owner: o, TTL: s.h.ttl(), Wait: true, Fair: s.h.Fair})
			if err != nil {
				t.Fatalf("driver Acquire: %v", err)
			}
			return g, driver.Held{Name: name, Owner: o, Token: g.Token, Handle: g.Handle}
		}
		release := func(h driver.Held) {
			t.Helper()
			if err := d.Release(testenv.Context(t, 30*time.Second), h); err != nil {
				t.Fatalf("driver Release: %v", err)
			}
		}
		_, h := grant(owner(1))
		release(h)
		g, _ := grant(owner(2))
		if g.Recovered {
			t.Errorf("grant after a clean release reports Recovered")
		}
		if err := admin.Break(testenv.Context(t, 30*time.Second), name); err != nil {
			t.Fatalf("Break: %v", err)
		}
		g, h = grant(owner(3))
		if !g.Recovered {
			t.Errorf("grant after a Break does not report Recovered, although Capabilities.LockDelay claims it")
		}
		release(h)
		l, err := c.Mutex(name, dlock.WithLockDelay(time.Hour)).Lock(testenv.Context(t, 60*time.Second))
		if err != nil {
			t.Fatalf("Lock with a lock-delay after a clean release: %v (the delay must apply only after a loss)", err)
		}
		mustUnlock(t, l)
	}
	l := mustLock(t, c, name)
	if err := admin.Break(testenv.Context(t, 30*time.Second), name); err != nil {
		t.Fatalf("Break: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if lw, err := c.Mutex(name, dlock.WithLockDelay(time.Hour)).Lock(ctx); !errors.Is(err, context.DeadlineExceeded) {
		if err == nil {
			_ = lw.Unlock(testenv.Context(t, 30*time.Second))
		}
		t.Fatalf("Lock with a one-hour lock-delay after a Break, 3s context: got %v, want context.DeadlineExceeded", err)
	}
	_ = l.Unlock(testenv.Context(t, 30*time.Second))
	l2, err := admin.Mutex(name).TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatalf("TryLock after a Lock gave up during its lock-delay: %v; it left the lock held", err)
	}
	mustUnlock(t, l2)
}

// testCancel cancels waiting Locks: each returns its context's error, and
// afterwards no ghost waiter or lock is left behind.
func (s *suite) testCancel(t *testing.T) {
	holderC := s.client(t)
	name := s.name(t, "l")
	l := mustLock(t, holderC, name)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := s.client(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(100*(i+1))*time.Millisecond)
			defer cancel()
			lw, err := c.Mutex(name).Lock(ctx)
			if err == nil {
				t.Errorf("waiter %d was granted a held lock (token %d)", i, lw.Token())
				return
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("waiter %d: got %v, want context.DeadlineExceeded", i, err)
			}
		}()
	}
	wg.Wait()
	inspector := s.client(t)
	testenv.Eventually(t, 10*time.Second, "the cancelled waiters to leave the queue", func() error {
		in, err := inspector.Inspect(testenv.Context(t, 30*time.Second), name)
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		if len(in.Waiters) != 0 {
			return fmt.Errorf("%d still queued", len(in.Waiters))
		}
		return nil
	})
	mustUnlock(t, l)
	// The lock must be free at once and stay free: a cancelled Lock has
	// left nothing behind when it returns, so no waiter that gave up may
	// be granted it, neither at this release nor at later ones (where a
	// ghost queue entry would be handed the lock).
	other := s.client(t)
	for round := range 5 {
		l2, err := other.Mutex(name).TryLock(testenv.Context(t, 30*time.Second))
		if err != nil {
			in, _ := inspector.Inspect(testenv.Context(t, 30*time.Second), name)
			t.Fatalf("TryLock %d after the holder released and all waiters gave up: %v (state: %+v)", round+1, err, in)
		}
		mustUnlock(t, l2)
		time.Sleep(100 * time.Millisecond) // a late hand-off to a ghost shows at the next round
	}
}

func (s *suite) testInspect(t *testing.T) {
	c, other := s.client(t), s.client(t)
	name := s.name(t, "l")
	ctx := testenv.Context(t, 30*time.Second)
	in, err := other.Inspect(ctx, name)
	if err != nil || in.Held {
		t.Fatalf("Inspect of a free lock: %+v, %v", in, err)
	}
	l := mustLock(t, c, name, dlock.WithNote("inspect me"))
	in, err = other.Inspect(ctx, name)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if !in.Held || in.Token != l.Token() || in.Holder.Note != "inspect me" || in.Holder.PID == 0 || in.Holder.Host == "" {
		t.Errorf("Inspect of a held lock = %+v; want held, token %d, the holder's note, host and pid", in, l.Token())
	}
	if in.ExpiresIn < 0 || in.ExpiresIn > l.TTL()+time.Second {
		t.Errorf("Inspect ExpiresIn = %v, want within [0, %v]", in.ExpiresIn, l.TTL())
	}
	if !s.caps.Sessions && in.ExpiresIn == 0 {
		t.Errorf("Inspect ExpiresIn = 0 on a backend with server-side TTLs")
	}
	unrelated := mustLock(t, c, s.prefix+"unrelated-"+strings.ReplaceAll(t.Name(), "/", "_"))
	list, err := other.List(ctx, s.name(t, ""))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list) != 1 || list[0].Name != name || list[0].Token != l.Token() {
		t.Errorf("List(%q) = %+v, want exactly %q", s.name(t, ""), list, name)
	}
	mustUnlock(t, unrelated)
	mustUnlock(t, l)
	in, err = other.Inspect(ctx, name)
	if err != nil || in.Held {
		t.Errorf("Inspect after release: %+v, %v; want free", in, err)
	}
}

// waitQueued waits until Inspect shows n waiters, where the backend lists
// them; otherwise it gives the waiter time to queue.
func (s *suite) waitQueued(t *testing.T, c *dlock.Client, name string, n int) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("waiter %d to show in Inspect", n), func() error {
		in, err := c.Inspect(testenv.Context(t, 30*time.Second), name)
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		if len(in.Waiters) < n {
			return fmt.Errorf("%d waiters", len(in.Waiters))
		}
		return nil
	})
}

func (s *suite) testFIFO(t *testing.T) {
	const waiters = 5
	holder, inspector := s.client(t, dlock.WithFair()), s.client(t)
	name := s.name(t, "l")
	l := mustLock(t, holder, name)
	order := make(chan int, waiters)
	errs := make(chan error, waiters)
	for i := range waiters {
		c := s.client(t, dlock.WithFair())
		go func() {
			lw, err := c.Mutex(name).Lock(testenv.Context(t, 120*time.Second))
			if err != nil {
				errs <- err
				return
			}
			order <- i
			time.Sleep(10 * time.Millisecond)
			errs <- lw.Unlock(testenv.Context(t, 30*time.Second))
		}()
		s.waitQueued(t, inspector, name, i+1)
	}
	mustUnlock(t, l)
	for range waiters {
		if err := <-errs; err != nil {
			t.Fatalf("waiter: %v", err)
		}
	}
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Errorf("grant %d went to waiter %d: not arrival order", want, got)
		}
		want++
	}
}

func (s *suite) testFairCancel(t *testing.T) {
	holder, inspector := s.client(t, dlock.WithFair()), s.client(t)
	name := s.name(t, "l")
	l := mustLock(t, holder, name)
	first, quitter, last := s.client(t, dlock.WithFair()), s.client(t, dlock.WithFair()), s.client(t, dlock.WithFair())
	got := make(chan string, 2)
	hold := func(c *dlock.Client, who string) {
		lw, err := c.Mutex(name).Lock(testenv.Context(t, 120*time.Second))
		if err != nil {
			got <- who + ": " + err.Error()
			return
		}
		got <- who
		_ = lw.Unlock(testenv.Context(t, 30*time.Second))
	}
	go hold(first, "first")
	s.waitQueued(t, inspector, name, 1)
	qctx, qcancel := context.WithCancel(context.Background())
	qerr := make(chan error, 1)
	go func() { _, err := quitter.Mutex(name).Lock(qctx); qerr <- err }()
	s.waitQueued(t, inspector, name, 2)
	go hold(last, "last")
	s.waitQueued(t, inspector, name, 3)
	qcancel()
	if err := <-qerr; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: got %v, want context.Canceled", err)
	}
	mustUnlock(t, l)
	for _, want := range []string{"first", "last"} {
		select {
		case g := <-got:
			if g != want {
				t.Fatalf("got grant to %q, want %q", g, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s was not granted within 30s: the cancelled waiter blocks the queue", want)
		}
	}
}

// testCrash runs a holder in another process and kills it with SIGKILL:
// the lock must be granted to another client with a higher token. On a
// backend with Sessions the holder's session ends with its process, so
// the lock is freed "at once": with a TTL of 30 s (or three times
// MinTTL), the grant must come before half of it has passed — an ordering
// against the TTL the backend claims not to wait for, not a speed
// measure. Otherwise it must come within the TTL, plus slack for a busy
// machine.
func (s *suite) testCrash(t *testing.T) {
	name := s.name(t, "l")
	ttl := s.h.ttl()
	if s.caps.Sessions {
		ttl = max(30*time.Second, 3*s.caps.MinTTL)
	}
	cmd, tok := StartHolder(t, s.h.URL, name, ttl)
	c := s.client(t)
	if _, err := c.Mutex(name).TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock while another process holds the lock: got %v, want ErrNotAcquired", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), ttl+20*time.Second)
	defer cancel()
	l, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatalf("the crashed holder's lock was not freed within its TTL %v (+20s): %v", ttl, err)
	}
	freed := time.Since(killed)
	t.Logf("lock freed %v after the holder was killed (TTL %v, sessions: %v)", freed.Round(time.Millisecond), ttl, s.caps.Sessions)
	if s.caps.Sessions && freed >= ttl/2 {
		t.Errorf("the killed holder's lock was freed %v after the kill, not before half its TTL %v: Capabilities.Sessions claims a crashed holder's lock is freed when its session ends", freed, ttl)
	}
	if l.Token() <= tok {
		t.Errorf("token after crash %d, want > %d", l.Token(), tok)
	}
	mustUnlock(t, l)
}

// staleOwnerIsRefused checks what the stale owner of a lease that ended
// may still do with d, the driver that held it: Extend and Release return
// ErrLeaseLost or ErrNotHeld (after retries while the driver reconnects),
// and neither touches l, the new holder's lease.
func (s *suite) staleOwnerIsRefused(t *testing.T, d driver.Driver, stale driver.Held, l *dlock.Lease, inspector *dlock.Client) {
	t.Helper()
	refused := func(what string, op func(ctx context.Context) error) {
		t.Helper()
		err := testenv.Poll(60*time.Second, func() error {
			err := op(testenv.Context(t, 30*time.Second))
			switch {
			case errors.Is(err, driver.ErrLeaseLost) || errors.Is(err, driver.ErrNotHeld):
				return nil
			case errors.Is(err, driver.ErrUnavailable):
				return err // the driver is reconnecting
			case err == nil:
				err = errors.New("success")
			}
			return testenv.Final(err)
		})
		if err != nil {
			t.Errorf("stale %s: got %v, want ErrLeaseLost or ErrNotHeld", what, err)
		}
	}
	refused("Extend", func(ctx context.Context) error { return d.Extend(ctx, stale, l.TTL()) })
	refused("Release", func(ctx context.Context) error { return d.Release(ctx, stale) })
	// The new holder's lease outlives a renewal after the stale calls.
	select {
	case <-l.Done():
		t.Fatalf("the new holder lost its lease after the stale owner's Extend and Release: %v", l.Err())
	case <-time.After(l.TTL() / 2):
	}
	in, err := inspector.Inspect(testenv.Context(t, 30*time.Second), l.Name())
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if !in.Held || in.Token != l.Token() {
		t.Errorf("after the stale owner's Extend and Release, Inspect shows held=%v token=%d; want the new holder's token %d", in.Held, in.Token, l.Token())
	}
	mustUnlock(t, l)
}

// testStaleAfterBreak breaks a lease held through the driver: the old
// owner's Extend and Release are refused and leave the next holder alone.
func (s *suite) testStaleAfterBreak(t *testing.T) {
	d, admin, next := s.driver(t), s.client(t), s.client(t)
	name := s.name(t, "l")
	req := driver.Request{Name: name, Owner: strings.Repeat("cd", 16), TTL: s.h.ttl(), Fair: s.h.Fair}
	g, err := d.Acquire(testenv.Context(t, 30*time.Second), req)
	if err != nil {
		t.Fatalf("driver Acquire: %v", err)
	}
	if err := admin.Break(testenv.Context(t, 30*time.Second), name); err != nil {
		t.Fatalf("Break: %v", err)
	}
	l := mustLock(t, next, name)
	if l.Token() <= g.Token {
		t.Errorf("token after Break %d, want > %d", l.Token(), g.Token)
	}
	s.staleOwnerIsRefused(t, d, driver.Held{Name: name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}, l, admin)
}

// testStaleAfterSession ends a holder's session the way a crash or a
// network failure does (its connections cut, reconnections frozen) until
// another client is granted the lock; then, reconnected, the old owner's
// Extend and Release are refused and leave the new holder alone.
func (s *suite) testStaleAfterSession(t *testing.T) {
	d, proxies := s.proxiedDriver(t)
	name := s.name(t, "l")
	req := driver.Request{Name: name, Owner: strings.Repeat("ef", 16), TTL: s.h.ttl(), Fair: s.h.Fair}
	g, err := d.Acquire(testenv.Context(t, 30*time.Second), req)
	if err != nil {
		t.Fatalf("driver Acquire: %v", err)
	}
	for _, p := range proxies {
		p.Block()
		p.Cut()
	}
	unblocked := false
	unblock := func() {
		if !unblocked {
			unblocked = true
			for _, p := range proxies {
				p.Unblock()
			}
		}
	}
	defer unblock()
	next := s.client(t)
	l := mustLock(t, next, name)
	if l.Token() <= g.Token {
		t.Errorf("token after the session ended %d, want > %d", l.Token(), g.Token)
	}
	unblock()
	s.staleOwnerIsRefused(t, d, driver.Held{Name: name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}, l, s.client(t))
}

// countingExtends counts the Extend calls made through a driver.
type countingExtends struct {
	driver.Driver
	n atomic.Int32
}

func (c *countingExtends) Extend(ctx context.Context, h driver.Held, ttl time.Duration) error {
	c.n.Add(1)
	return c.Driver.Extend(ctx, h, ttl)
}

// testRenewalRate holds a lease for two TTLs and counts the renewals: the
// portable layer renews every third of the TTL, so about six; far fewer
// risks the lease on one slow reply, far more loads the backend.
func (s *suite) testRenewalRate(t *testing.T) {
	d := &countingExtends{Driver: s.driver(t)}
	c := dlock.New(d, s.opts()...)
	l := mustLock(t, c, s.name(t, "l"))
	select {
	case <-l.Done():
		t.Fatalf("lease ended while renewed: %v", l.Err())
	case <-time.After(2 * l.TTL()):
	}
	mustUnlock(t, l)
	if n := d.n.Load(); n < 4 || n > 9 {
		t.Errorf("%d renewals while a lease of TTL %v was held for two TTLs; want about 6 (one every TTL/3), within 4..9", n, l.TTL())
	}
}

// testMinTTL checks the Capabilities.MinTTL claim: a TTL at the minimum
// is granted, a shorter one refused with ErrInvalidOption.
func (s *suite) testMinTTL(t *testing.T) {
	min := s.caps.MinTTL
	if min <= 0 {
		t.Logf("Capabilities.MinTTL is 0: no minimum claimed, nothing to check")
		return
	}
	c := s.client(t)
	name := s.name(t, "l")
	if min > time.Nanosecond {
		if _, err := c.Mutex(name, dlock.WithTTL(min-time.Nanosecond)).TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("TryLock with TTL %v, below Capabilities.MinTTL %v: got %v, want ErrInvalidOption", min-time.Nanosecond, min, err)
		}
	}
	// The grant's own TTL may differ (ZooKeeper grants a session's lease,
	// two thirds of the session timeout that is its MinTTL): MinTTL bounds
	// what may be requested.
	l, err := c.Mutex(name, dlock.WithTTL(min)).TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatalf("TryLock with TTL = Capabilities.MinTTL %v: %v", min, err)
	}
	// A lease this short may be lost to one late timer on a busy machine:
	// the release is a clean-up here, not what is checked.
	_ = l.Unlock(testenv.Context(t, 30*time.Second))
}

// proxiedClient opens a client whose traffic to each endpoint goes through
// a proxy of its own, for the test to cut or freeze.
func (s *suite) proxiedClient(t *testing.T) (*dlock.Client, []*testenv.Proxy) {
	d, proxies := s.proxiedDriver(t)
	return dlock.New(d, s.opts()...), proxies
}

// proxiedDriver opens a driver whose traffic to each endpoint goes through
// a proxy of its own.
func (s *suite) proxiedDriver(t *testing.T) (driver.Driver, []*testenv.Proxy) {
	proxies := make([]*testenv.Proxy, len(s.h.Endpoints))
	addrs := make([]string, len(s.h.Endpoints))
	for i, ep := range s.h.Endpoints {
		proxies[i] = testenv.NewProxy(t, ep)
		addrs[i] = proxies[i].Addr()
	}
	return s.driverAt(t, addrs), proxies
}

// testPartition freezes a holder's traffic with a proxy: no other client
// may acquire the lock before the holder's lease deadline (Expires), and
// the holder must see its lease lost (Done closed) by then — or, if its
// process was starved of CPU, within a bound after.
func (s *suite) testPartition(t *testing.T) {
	holder, proxies := s.proxiedClient(t)
	name := s.name(t, "l")
	l := mustLock(t, holder, name)
	// A Do of the same client, on a lock of its own: its context must end
	// with the loss, and Do must return (its release of the lost lease
	// cannot reach the backend, and must not hang).
	doGranted, doCause, doErr := make(chan struct{}), make(chan error, 1), make(chan error, 1)
	go func() {
		doErr <- holder.Do(testenv.Context(t, 180*time.Second), s.name(t, "do"), func(ctx context.Context, _ *dlock.Lease) error {
			close(doGranted)
			<-ctx.Done()
			doCause <- context.Cause(ctx)
			return nil
		})
	}()
	select {
	case <-doGranted:
	case err := <-doErr:
		t.Fatalf("Do: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("Do was not granted a free lock within 60s")
	}
	// Let one renewal through, so the deadline is a renewal's.
	time.Sleep(l.TTL() / 2)
	for _, p := range proxies {
		p.Block()
	}
	blocked := time.Now()
	defer func() {
		for _, p := range proxies {
			p.Unblock()
		}
	}()

	other := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*l.TTL()+30*time.Second)
	defer cancel()
	var l2 *dlock.Lease
	for l2 == nil {
		lw, err := other.Mutex(name).TryLock(ctx)
		switch {
		case err == nil:
			l2 = lw
		case errors.Is(err, dlock.ErrNotAcquired):
			select {
			case <-ctx.Done():
				t.Fatalf("the partitioned holder's lock was never freed: %v", ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		default:
			t.Fatalf("TryLock: %v", err)
		}
	}
	acquired := time.Now()
	// The lease's guarantee is its deadline: the holder may act until
	// Expires, so nobody else may be granted the lock before it.
	if deadline := l.Expires(); acquired.Before(deadline) {
		t.Fatalf("another client acquired the lock (token %d) %v after the partition, %v before the partitioned holder's lease deadline",
			l2.Token(), acquired.Sub(blocked), deadline.Sub(acquired))
	}
	select {
	case <-l.Done():
	default:
		// The deadline has passed but the holder's expiry timer has not
		// run: its process was starved of CPU (a loaded 2-core machine
		// delays a timer by tens of ms). That delays the notification,
		// not the deadline held to above; it must still come, and soon.
		bound := time.Second + l.TTL()/4
		select {
		case <-l.Done():
			t.Logf("Done closed %v after the lease deadline (the process was starved); another client acquired the lock %v after it",
				time.Since(l.Expires()), acquired.Sub(l.Expires()))
		case <-time.After(bound):
			t.Fatalf("another client acquired the lock (token %d) %v after the partition, and the partitioned holder's Done did not close within %v after its lease deadline",
				l2.Token(), acquired.Sub(blocked), bound)
		}
	}
	if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
		t.Errorf("partitioned lease Err = %v, want ErrLeaseLost", l.Err())
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token after partition %d, want > %d", l2.Token(), l.Token())
	}
	mustUnlock(t, l2)
	select {
	case err := <-doErr:
		if !errors.Is(err, dlock.ErrLeaseLost) {
			t.Errorf("Do of the partitioned client returned %v, want an error wrapping ErrLeaseLost", err)
		}
		if cause := <-doCause; !errors.Is(cause, dlock.ErrLeaseLost) {
			t.Errorf("the partitioned Do's context ended with cause %v, want ErrLeaseLost", cause)
		}
	case <-time.After(l.TTL() + 2*driver.CleanupTimeout + 30*time.Second):
		t.Fatal("Do of the partitioned client did not return: its context was not cancelled, or its release hangs")
	}
}

// testFrozen freezes all of one client's traffic (the servers go silent,
// connections stay open): every call honours its context, and returns its
// error or ErrUnavailable; none hangs, none reports success.
func (s *suite) testFrozen(t *testing.T) {
	c, proxies := s.proxiedClient(t)
	name := s.name(t, "l")
	held := mustLock(t, c, name)
	for _, p := range proxies {
		p.Block()
	}
	defer func() {
		for _, p := range proxies {
			p.Unblock()
		}
	}()
	unlocked := func(l *dlock.Lease, err error) error {
		if err == nil {
			return fmt.Errorf("granted token %d by a frozen backend", l.Token())
		}
		return err
	}
	calls := []struct {
		desc string
		call func(ctx context.Context) error
	}{
		{"TryLock", func(ctx context.Context) error { return unlocked(c.Mutex(s.name(t, "try")).TryLock(ctx)) }},
		{"Lock", func(ctx context.Context) error { return unlocked(c.Mutex(s.name(t, "wait")).Lock(ctx)) }},
		{"Inspect", func(ctx context.Context) error { _, err := c.Inspect(ctx, name); return err }},
		{"List", func(ctx context.Context) error { _, err := c.List(ctx, s.name(t, "")); return err }},
		{"Break", func(ctx context.Context) error { return c.Break(ctx, s.name(t, "free")) }},
		{"Unlock", func(ctx context.Context) error { return held.Unlock(ctx) }},
		{"Do", func(ctx context.Context) error {
			return c.Do(ctx, s.name(t, "do"), func(context.Context, *dlock.Lease) error { return nil })
		}},
	}
	const callTimeout = 2 * time.Second
	results := make(chan error, len(calls))
	for _, tc := range calls {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			err := tc.call(ctx)
			switch {
			case err == nil:
				err = fmt.Errorf("%s succeeded against a frozen backend", tc.desc)
			case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlock.ErrUnavailable):
				err = nil
			default:
				err = fmt.Errorf("%s against a frozen backend: got %v, want its context's error or ErrUnavailable", tc.desc, err)
			}
			results <- err
		}()
	}
	// A call may take its context's time, then clean up within
	// CleanupTimeout (a cancelled acquire learns the outcome of its last
	// attempt), and more on a loaded machine; never forever.
	bound := time.After(callTimeout + 2*driver.CleanupTimeout + 30*time.Second)
	for range calls {
		select {
		case err := <-results:
			if err != nil {
				t.Error(err)
			}
		case <-bound:
			t.Fatalf("a call on a frozen backend did not return within %v of its %v context", 2*driver.CleanupTimeout+30*time.Second, callTimeout)
		}
	}
}

// testSendTime slows a client's traffic (each chunk, each way, by delay):
// the lease's deadline must count from the send time of the request the
// server confirmed, never from the reply's arrival, both for the grant
// and for a renewal.
func (s *suite) testSendTime(t *testing.T) {
	c, proxies := s.proxiedClient(t)
	const delay = 50 * time.Millisecond
	for _, p := range proxies {
		p.SetDelay(delay)
	}
	defer func() {
		for _, p := range proxies {
			p.SetDelay(0)
		}
	}()
	// Every answer arrives at least two delays after its request was sent,
	// so a deadline seen at time now is at most now - 2·delay + TTL.
	latest := func(l *dlock.Lease) time.Time { return time.Now().Add(l.TTL() - 2*delay) }
	name := s.name(t, "l")
	l := mustLock(t, c, name)
	first := l.Expires()
	if bound := latest(l); first.After(bound) {
		t.Errorf("the grant's deadline is %v later than the send time of any request answered by now allows: it is not counted from the send time", first.Sub(bound))
	}
	// A renewal is due TTL/3 after the grant.
	for end := time.Now().Add(l.TTL()); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		exp := l.Expires()
		if !exp.After(first) {
			continue
		}
		if bound := latest(l); exp.After(bound) {
			t.Errorf("after a renewal the deadline is %v later than the send time of any renewal answered by now allows: it is not counted from the send time", exp.Sub(bound))
		}
		mustUnlock(t, l)
		return
	}
	t.Fatalf("no renewal confirmed within the TTL %v with %v of delay each way (lease: %v)", l.TTL(), delay, l.Err())
}

// testRestart restarts the backend's servers: tokens must keep increasing,
// both after a lock released before the restart and after one held across
// it (released, or lost, afterwards).
func (s *suite) testRestart(t *testing.T) {
	name, heldName := s.name(t, "l"), s.name(t, "held")
	c := s.client(t)
	l := mustLock(t, c, name)
	before := l.Token()
	mustUnlock(t, l)
	held := mustLock(t, c, heldName)
	s.h.Restart(t)
	c2 := s.client(t)
	lockAfter := func(name string) *dlock.Lease {
		t.Helper()
		var l *dlock.Lease
		testenv.Eventually(t, 60*time.Second+2*s.h.ttl(), fmt.Sprintf("Lock(%q) to succeed after the restart", name), func() (err error) {
			l, err = c2.Mutex(name).Lock(testenv.Context(t, 30*time.Second))
			return err
		})
		return l
	}
	check := func(what string, after, before uint64) {
		t.Helper()
		if after > before {
			return
		}
		if s.caps.DurableFencing {
			t.Errorf("token %s %d, want > %d: the backend claims DurableFencing", what, after, before)
		} else {
			t.Logf("token %s %d <= %d: tokens are not durable on this backend (as its Capabilities say)", what, after, before)
		}
	}
	l2 := lockAfter(name)
	check("after restart", l2.Token(), before)
	mustUnlock(t, l2)
	// Released if the lease outlived the restart, refused if it did not:
	// either way the next grant must be higher.
	_ = held.Unlock(testenv.Context(t, 30*time.Second))
	l3 := lockAfter(heldName)
	check("after a lock held across the restart", l3.Token(), held.Token())
	mustUnlock(t, l3)
}
