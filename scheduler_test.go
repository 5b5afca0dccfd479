package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/memlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// events records the order in which leases' hooks ran, by name.
type events struct {
	mu       sync.Mutex
	renewed  []string // each lease's first renewal
	lost     []string
	lostWhy  map[string]string
	seen     map[string]bool
	allSeen  chan struct{}
	expected int
}

func newEvents(n int) *events {
	return &events{lostWhy: map[string]string{}, seen: map[string]bool{}, allSeen: make(chan struct{}), expected: n}
}

func (e *events) hooks() dlock.Hooks {
	return dlock.Hooks{
		Renewed: func(name string, _ uint64, _ time.Duration) {
			e.mu.Lock()
			defer e.mu.Unlock()
			if !e.seen[name] {
				e.seen[name] = true
				e.renewed = append(e.renewed, name)
				if len(e.renewed) == e.expected {
					close(e.allSeen)
				}
			}
		},
		Lost: func(name string, _ uint64, err error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.lost = append(e.lost, name)
			e.lostWhy[name] = dlock.LossCause(err)
		},
	}
}

// ttlLadder is the TTLs of the ordering tests, far enough apart (a third
// of 300ms between renewals, 300ms between deadlines) that the order of
// the events is the order of their due times, not of goroutine start-up.
func ttlLadder(n int) []time.Duration {
	ttls := make([]time.Duration, n)
	for i := range ttls {
		ttls[i] = time.Second + time.Duration(i)*300*time.Millisecond
	}
	return ttls
}

// lockLadder takes one lock per TTL, the longest first, so that the order
// of the grants is the reverse of the order of the due times.
func lockLadder(t *testing.T, c *dlock.Client, ttls []time.Duration) (names []string, leases []*dlock.Lease) {
	t.Helper()
	names = make([]string, len(ttls))
	leases = make([]*dlock.Lease, len(ttls))
	for i := len(ttls) - 1; i >= 0; i-- {
		names[i] = fmt.Sprintf("ttl-%v", ttls[i])
		l, err := c.Mutex(names[i], dlock.WithTTL(ttls[i])).Lock(testenv.Context(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
	}
	return names, leases
}

// TestLeasesWithDifferentTTLsRenewAndExpireInDeadlineOrder: one client's
// leases, taken in the reverse order of their TTLs, are first renewed in
// the order of their TTLs (a renewal is due TTL/3 after the grant); cut
// off from the backend, they are lost in the order of their deadlines,
// each as unreachable.
func TestLeasesWithDifferentTTLsRenewAndExpireInDeadlineOrder(t *testing.T) {
	const n = 8
	ttls := ttlLadder(n)

	renewals := newEvents(n)
	c := dlock.New(memlock.New(memlock.NewServer()), dlock.WithHooks(renewals.hooks()))
	defer c.Close()
	names, leases := lockLadder(t, c, ttls)
	select {
	case <-renewals.allSeen:
	case <-time.After(60 * time.Second):
		t.Fatalf("not every lease renewed within 60s: renewed %v", renewals.renewed)
	}
	renewals.mu.Lock()
	if !slices.Equal(renewals.renewed, names) {
		t.Errorf("first renewals in the order %v, want the order of the TTLs %v", renewals.renewed, names)
	}
	renewals.mu.Unlock()
	for _, l := range leases {
		if err := l.Unlock(testenv.Context(t, 5*time.Second)); err != nil {
			t.Errorf("Unlock(%s): %v", l.Name(), err)
		}
	}

	losses := newEvents(n)
	d := memlock.New(memlock.NewServer())
	cut := dlock.New(d, dlock.WithHooks(losses.hooks()))
	defer cut.Close()
	defer d.SetPartitioned(false)
	_, leases = lockLadder(t, cut, ttls)
	d.SetPartitioned(true)
	for _, l := range leases {
		select {
		case <-l.Done():
		case <-time.After(60 * time.Second):
			t.Fatalf("%s not lost 60s after the backend was cut off", l.Name())
		}
	}
	// Done closes before the Lost hook runs: wait for every hook.
	testenv.Eventually(t, 30*time.Second, "every Lost hook", func() error {
		losses.mu.Lock()
		defer losses.mu.Unlock()
		if len(losses.lost) < n {
			return fmt.Errorf("%d of %d", len(losses.lost), n)
		}
		return nil
	})
	losses.mu.Lock()
	defer losses.mu.Unlock()
	if !slices.Equal(losses.lost, names) {
		t.Errorf("leases lost in the order %v, want the order of their deadlines %v", losses.lost, names)
	}
	for name, why := range losses.lostWhy {
		if why != dlock.LossUnreachable {
			t.Errorf("%s lost as %q, want %q", name, why, dlock.LossUnreachable)
		}
	}
}

// agreeingExtend is a backend that confirms renewals of locks that were
// released (as a backend whose release is not yet visible to the renewal
// might), and whose releases of some locks fail: only the client can stop
// renewing. It counts Extend calls by name, and those made after the test
// marked the name released.
type agreeingExtend struct {
	*memlock.Driver
	mu          sync.Mutex
	released    map[string]bool
	failRelease map[string]bool
	after       map[string]int // Extend calls after the name was released
	calls       map[string]int
}

func (d *agreeingExtend) Extend(ctx context.Context, h driver.Held, ttl time.Duration) error {
	d.mu.Lock()
	d.calls[h.Name]++
	if d.released[h.Name] {
		d.after[h.Name]++
		d.mu.Unlock()
		return nil
	}
	d.mu.Unlock()
	return d.Driver.Extend(ctx, h, ttl)
}

func (d *agreeingExtend) Release(ctx context.Context, h driver.Held) error {
	d.mu.Lock()
	fail := d.failRelease[h.Name]
	d.mu.Unlock()
	if fail {
		return fmt.Errorf("%w: release refused by the test", driver.ErrUnavailable)
	}
	return d.Driver.Release(ctx, h)
}

// TestUnlockedLeaseIsNeverRenewedAgain: leases renewed every 100ms are
// unlocked one by one, each after a few renewals; the release of every
// other one fails, which leaves it held until its deadline. In the ten
// renewal intervals after its Unlock returned, no lease is renewed again
// (at most one renewal already in flight at the Unlock may still arrive),
// though the backend would confirm it; and each lease whose release
// failed is lost at its deadline.
func TestUnlockedLeaseIsNeverRenewedAgain(t *testing.T) {
	const n, ttl = 10, 300 * time.Millisecond
	d := &agreeingExtend{Driver: memlock.New(memlock.NewServer()), released: map[string]bool{}, failRelease: map[string]bool{}, after: map[string]int{}, calls: map[string]int{}}
	c := dlock.New(d, dlock.WithTTL(ttl))
	defer c.Close()
	leases := make([]*dlock.Lease, n)
	for i := range leases {
		name := fmt.Sprintf("unlocked-%d", i)
		l, err := c.Mutex(name).Lock(testenv.Context(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
		d.mu.Lock()
		d.failRelease[name] = i%2 == 1
		d.mu.Unlock()
	}
	testenv.Eventually(t, 60*time.Second, "every lease renewed twice", func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, l := range leases {
			if d.calls[l.Name()] < 2 {
				return fmt.Errorf("%s renewed %d times", l.Name(), d.calls[l.Name()])
			}
		}
		return nil
	})
	for i, l := range leases {
		err := l.Unlock(testenv.Context(t, 5*time.Second))
		d.mu.Lock()
		d.released[l.Name()] = true
		d.mu.Unlock()
		// A lease lost meanwhile (a starved test process) proves nothing
		// either way, and is no failure.
		switch {
		case errors.Is(err, dlock.ErrLeaseLost):
		case i%2 == 1 && !errors.Is(err, dlock.ErrUnavailable):
			t.Errorf("Unlock(%s) whose release fails: %v, want ErrUnavailable", l.Name(), err)
		case i%2 == 0 && err != nil:
			t.Errorf("Unlock(%s): %v", l.Name(), err)
		}
		time.Sleep(ttl / 6) // the others go on being renewed meanwhile
	}
	time.Sleep(10 * ttl / 3)
	d.mu.Lock()
	for _, l := range leases {
		if k := d.after[l.Name()]; k > 1 {
			t.Errorf("%s: %d renewals after its Unlock returned", l.Name(), k)
		}
	}
	d.mu.Unlock()
	for i := 1; i < n; i += 2 {
		l := leases[i]
		select {
		case <-l.Done():
		case <-time.After(60 * time.Second):
			t.Fatalf("%s, whose release failed, not lost 60s after its deadline", l.Name())
		}
		if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
			t.Errorf("%s, whose release failed, ended with %v, want ErrLeaseLost", l.Name(), l.Err())
		}
	}
}

// blockingExtend is a backend on which renewals of one lock block, even
// past their context, until the test lets them go, while renewals of the
// others fail at once: a renewal stuck in a driver that does not honour
// its context.
type blockingExtend struct {
	*memlock.Driver
	stuck   string
	entered chan struct{} // closed when a renewal of stuck has begun
	once    sync.Once
	release chan struct{}
}

func (d *blockingExtend) Extend(ctx context.Context, h driver.Held, ttl time.Duration) error {
	if h.Name == d.stuck {
		d.once.Do(func() { close(d.entered) })
		<-d.release
		return fmt.Errorf("%w: extend: stuck", driver.ErrUnavailable)
	}
	return fmt.Errorf("%w: extend: refused by the test", driver.ErrUnavailable)
}

// TestBlockedRenewalDelaysNoExpiry: while one lease's renewal is blocked
// in its driver, another lease whose renewals fail is lost at its
// deadline, and so is the blocked lease itself (as unreachable): neither
// waits for the blocked renewal.
func TestBlockedRenewalDelaysNoExpiry(t *testing.T) {
	d := &blockingExtend{Driver: memlock.New(memlock.NewServer()), stuck: "stuck", entered: make(chan struct{}), release: make(chan struct{})}
	defer close(d.release)
	c := dlock.New(d)
	defer c.Close()
	ctx := testenv.Context(t, 5*time.Second)
	stuck, err := c.Mutex("stuck", dlock.WithTTL(300*time.Millisecond)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.entered:
	case <-time.After(60 * time.Second):
		t.Fatal("the stuck lease's renewal did not begin within 60s")
	}
	// Taken once the stuck renewal is blocked: its renewals and expiry
	// all come due after that.
	other, err := c.Mutex("other", dlock.WithTTL(600*time.Millisecond)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []*dlock.Lease{other, stuck} {
		select {
		case <-l.Done():
		case <-time.After(60 * time.Second):
			t.Fatalf("%s not lost 60s after its deadline, while a renewal of stuck is blocked", l.Name())
		}
		if why := dlock.LossCause(l.Err()); why != dlock.LossUnreachable {
			t.Errorf("%s lost as %q (%v), want %q", l.Name(), why, l.Err(), dlock.LossUnreachable)
		}
	}
}

// allExtendsBlock is a backend on which every renewal blocks until the
// test lets them go, counting how many are in flight at once. Its grants
// carry no loss signal: only the client's deadline can end them.
type allExtendsBlock struct {
	*memlock.Driver
	mu       sync.Mutex
	inFlight int
	most     int
	release  chan struct{}
}

func (d *allExtendsBlock) Extend(ctx context.Context, h driver.Held, ttl time.Duration) error {
	d.mu.Lock()
	d.inFlight++
	d.most = max(d.most, d.inFlight)
	d.mu.Unlock()
	<-d.release
	d.mu.Lock()
	d.inFlight--
	d.mu.Unlock()
	return fmt.Errorf("%w: extend: blocked by the test", driver.ErrUnavailable)
}

func (d *allExtendsBlock) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := d.Driver.Acquire(ctx, req)
	g.Lost = nil
	return g, err
}

func (d *allExtendsBlock) counts() (inFlight, most int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inFlight, d.most
}

// TestRenewalsInFlightAreBoundedAndWaitingOnesStillExpire: a client whose
// leases all come due at once sends at most MaxRenewals renewals at a
// time; a lease whose renewal waits its turn is still lost at its
// deadline, as expired (its renewal never went out), and the leases whose
// renewals went unanswered as unreachable.
func TestRenewalsInFlightAreBoundedAndWaitingOnesStillExpire(t *testing.T) {
	d := &allExtendsBlock{Driver: memlock.New(memlock.NewServer()), release: make(chan struct{})}
	c := dlock.New(d)
	defer c.Close()
	defer close(d.release)
	ctx := testenv.Context(t, 30*time.Second)
	n := dlock.MaxRenewals + 20
	leases := make([]*dlock.Lease, n)
	for i := range leases {
		l, err := c.Mutex(fmt.Sprintf("bounded/%d", i), dlock.WithTTL(time.Second)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
	}
	testenv.Eventually(t, 30*time.Second, "every renewer busy", func() error {
		if in, _ := d.counts(); in != dlock.MaxRenewals {
			return fmt.Errorf("%d renewals in flight", in)
		}
		return nil
	})
	causes := map[string]int{}
	for _, l := range leases {
		select {
		case <-l.Done():
		case <-time.After(30 * time.Second):
			t.Fatalf("%s not lost 30s after its deadline, its renewal blocked or waiting", l.Name())
		}
		causes[dlock.LossCause(l.Err())]++
	}
	if want := map[string]int{dlock.LossUnreachable: dlock.MaxRenewals, dlock.LossExpired: n - dlock.MaxRenewals}; !maps.Equal(causes, want) {
		t.Errorf("leases lost as %v, want %v", causes, want)
	}
	if _, most := d.counts(); most != dlock.MaxRenewals {
		t.Errorf("%d renewals were in flight at once, want at most (and here exactly) %d", most, dlock.MaxRenewals)
	}
}

// Unlock takes the lease out of its client's scheduler at once, before
// and after its first renewal: a released lease is neither woken by the
// scheduler later nor kept in memory by it.
func TestUnlockTakesLeaseOutOfScheduler(t *testing.T) {
	renewed := make(chan struct{}, 1)
	c := dlock.New(memlock.New(memlock.NewServer()), dlock.WithHooks(dlock.Hooks{
		Renewed: func(string, uint64, time.Duration) {
			select {
			case renewed <- struct{}{}:
			default:
			}
		},
	}))
	defer c.Close()
	ctx := context.Background()
	for _, renew := range []bool{false, true} {
		ttl := time.Minute
		if renew {
			ttl = 300 * time.Millisecond // the first renewal is due after 100ms
		}
		l, err := c.Mutex("scheduled", dlock.WithTTL(ttl)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := dlock.Scheduled(c); n != 1 {
			t.Fatalf("held (renewed: %v): %d leases in the scheduler, want 1", renew, n)
		}
		if renew {
			select {
			case <-renewed:
			case <-time.After(30 * time.Second):
				t.Fatal("no renewal")
			}
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if n := dlock.Scheduled(c); n != 0 {
			t.Errorf("after Unlock (renewed: %v): %d leases in the scheduler, want 0", renew, n)
		}
	}
}

// releasesBlock is memlock whose releases wait until unblock is closed
// (then release) or their context ends (then fail), counting how many are
// in flight, and whose grants carry no loss signal.
type releasesBlock struct {
	*memlock.Driver
	unblock chan struct{}
	mu      sync.Mutex
	calls   int
	in      int
	most    int
}

func (d *releasesBlock) Release(ctx context.Context, h driver.Held) error {
	d.mu.Lock()
	d.calls++
	d.in++
	d.most = max(d.most, d.in)
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.in--
		d.mu.Unlock()
	}()
	select {
	case <-d.unblock:
		return d.Driver.Release(ctx, h)
	case <-ctx.Done():
		return fmt.Errorf("%w: release: blocked by the test: %w", driver.ErrUnavailable, ctx.Err())
	}
}

// Acquire drops memlock's own loss signal: only the client's deadline
// ends a lease.
func (d *releasesBlock) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := d.Driver.Acquire(ctx, req)
	g.Lost = nil
	return g, err
}

func (d *releasesBlock) counts() (calls, in, most int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls, d.in, d.most
}

func holdMany(t *testing.T, c *dlock.Client, n int, ttl time.Duration) []*dlock.Lease {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	leases := make([]*dlock.Lease, n)
	for i := range leases {
		l, err := c.Mutex(fmt.Sprintf("close/%d", i), dlock.WithTTL(ttl)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
	}
	return leases
}

// TestCloseSendsAtMostMaxRenewalsReleasesAtOnce: Close releases every
// lease still held, with at most MaxRenewals releases in flight.
func TestCloseSendsAtMostMaxRenewalsReleasesAtOnce(t *testing.T) {
	srv := memlock.NewServer()
	d := &releasesBlock{Driver: memlock.New(srv), unblock: make(chan struct{})}
	c := dlock.New(d)
	n := 3 * dlock.MaxRenewals
	holdMany(t, c, n, time.Minute)
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	testenv.Eventually(t, 30*time.Second, "every releaser busy", func() error {
		if _, in, _ := d.counts(); in != dlock.MaxRenewals {
			return fmt.Errorf("%d releases in flight", in)
		}
		return nil
	})
	close(d.unblock)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if calls, _, most := d.counts(); calls != n || most != dlock.MaxRenewals {
		t.Errorf("Close sent %d releases, at most %d at once; want %d, at most (and here exactly) %d", calls, most, n, dlock.MaxRenewals)
	}
	other := dlock.New(memlock.New(srv))
	defer other.Close()
	for i := range n {
		in, err := other.Inspect(context.Background(), fmt.Sprintf("close/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if in.Held {
			t.Fatalf("close/%d is still held after Close", i)
		}
	}
}

// TestCloseGivesUpOnTheRestAtItsBound: when the releases do not come back,
// Close gives up at driver.CleanupTimeout: the leases it had not sent a
// release for yet get none (each would otherwise make a clean-up of its
// own, one CleanupTimeout each), and every lease ends at its deadline,
// the unanswered releases as unreachable, the others as expired.
func TestCloseGivesUpOnTheRestAtItsBound(t *testing.T) {
	d := &releasesBlock{Driver: memlock.New(memlock.NewServer()), unblock: make(chan struct{})}
	c := dlock.New(d)
	n := 3 * dlock.MaxRenewals
	// A TTL beyond Close's bound: the failed releases have come back
	// before the deadlines.
	leases := holdMany(t, c, n, driver.CleanupTimeout+3*time.Second)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	calls, _, _ := d.counts()
	if calls != dlock.MaxRenewals {
		t.Errorf("Close sent %d releases; want the first %d only", calls, dlock.MaxRenewals)
	}
	causes := map[string]int{}
	for _, l := range leases {
		select {
		case <-l.Done():
		case <-time.After(30 * time.Second):
			t.Fatalf("%s not ended 30s after its deadline", l.Name())
		}
		causes[dlock.LossCause(l.Err())]++
	}
	if want := map[string]int{dlock.LossUnreachable: calls, dlock.LossExpired: n - calls}; !maps.Equal(causes, want) {
		t.Errorf("leases ended as %v, want %v", causes, want)
	}
}

// batchingExtend is a backend that renews leases in batches
// (driver.BatchExtender). Its first renewals sent one by one block until
// the test opens the gate, so that the others queue; it records the names
// of those, and the size of every batch.
type batchingExtend struct {
	*memlock.Driver
	gate chan struct{}

	mu      sync.Mutex
	singles map[string]bool
	batches []int
}

func (d *batchingExtend) Extend(ctx context.Context, h driver.Held, ttl time.Duration) error {
	d.mu.Lock()
	d.singles[h.Name] = true
	d.mu.Unlock()
	<-d.gate
	return d.Driver.Extend(ctx, h, ttl)
}

func (d *batchingExtend) ExtendBatch(ctx context.Context, b []driver.Extension) []error {
	d.mu.Lock()
	d.batches = append(d.batches, len(b))
	d.mu.Unlock()
	errs := make([]error, len(b))
	for i, e := range b {
		errs[i] = d.Driver.Extend(ctx, e.Held, e.TTL)
	}
	return errs
}

func (d *batchingExtend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := d.Driver.Acquire(ctx, req)
	g.Lost = nil // only the renewal's answer tells a lease it was broken
	return g, err
}

func (d *batchingExtend) sent() (singles map[string]bool, batches []int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.singles), slices.Clone(d.batches)
}

// TestQueuedRenewalsGoOutInBatches: when a client's leases come due
// together on a backend that renews many in one request, MaxBatchRenewals
// renewals go out alone and the rest queue while they are unanswered; the
// queued ones then go out in batches of at most driver.MaxBatch, each
// lease in one batch; the leases a batch renews stay held (their deadline
// moves on), and those it finds broken are lost, as broken, each by its
// own answer.
func TestQueuedRenewalsGoOutInBatches(t *testing.T) {
	d := &batchingExtend{Driver: memlock.New(memlock.NewServer()), gate: make(chan struct{}), singles: map[string]bool{}}
	c := dlock.New(d)
	defer c.Close()
	ctx := testenv.Context(t, 30*time.Second)
	const queued = 2*driver.MaxBatch + 100
	leases := make([]*dlock.Lease, dlock.MaxBatchRenewals+queued)
	for i := range leases {
		l, err := c.Mutex(fmt.Sprintf("batched/%d", i), dlock.WithTTL(6*time.Second)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
	}
	// Every lease comes due 2s after its grant; the first MaxBatchRenewals block
	// in Extend, the rest queue.
	time.Sleep(time.Until(leases[len(leases)-1].Expires().Add(-4*time.Second + 500*time.Millisecond)))
	singles, batches := d.sent()
	if len(singles) != dlock.MaxBatchRenewals || len(batches) != 0 {
		t.Fatalf("before the renewers were free: %d renewals sent one by one and %d batches, want %d and none", len(singles), len(batches), dlock.MaxBatchRenewals)
	}
	broken := map[string]bool{}
	for _, l := range leases {
		if len(broken) < 10 && !singles[l.Name()] {
			broken[l.Name()] = true
			if err := d.Break(ctx, l.Name()); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := make([]time.Time, len(leases))
	for i, l := range leases {
		before[i] = l.Expires()
	}
	close(d.gate)
	testenv.Eventually(t, 3*time.Second, "every lease renewed or lost", func() error {
		for i, l := range leases {
			select {
			case <-l.Done():
				continue
			default:
			}
			if !l.Expires().After(before[i]) {
				return fmt.Errorf("%s not renewed yet", l.Name())
			}
		}
		return nil
	})
	singles, batches = d.sent()
	total := 0
	for _, n := range batches {
		total += n
		if n > driver.MaxBatch {
			t.Errorf("a batch of %d renewals, want at most %d", n, driver.MaxBatch)
		}
	}
	// Renewals of the leases that were sent one by one may have come due
	// again meanwhile (a renewal every 2s); those of the queued ones not.
	if total != queued || len(singles) != dlock.MaxBatchRenewals {
		t.Errorf("%d renewals went out in %d batches (%v) and %d one by one, want the %d queued ones in batches and %d one by one", total, len(batches), batches, len(singles), queued, dlock.MaxBatchRenewals)
	}
	if min := (queued + driver.MaxBatch - 1) / driver.MaxBatch; len(batches) < min {
		t.Errorf("%d batches, want at least %d", len(batches), min)
	}
	for _, l := range leases {
		select {
		case <-l.Done():
			if !broken[l.Name()] {
				t.Errorf("%s lost though renewed: %v", l.Name(), l.Err())
			} else if cause := dlock.LossCause(l.Err()); cause != dlock.LossBroken {
				t.Errorf("%s lost as %q, want %q", l.Name(), cause, dlock.LossBroken)
			}
		default:
			if broken[l.Name()] {
				t.Errorf("%s was broken but its lease goes on", l.Name())
			}
		}
	}
}
