package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/dlock/dlock/internal/testenv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/memlock"
	"github.com/dlock/dlock/driver"
)

func TestPartitionedHolderSeesLossBeforeServerExpiry(t *testing.T) {
	srv := memlock.NewServer()
	d := memlock.New(srv)
	holder := dlock.New(d, dlock.WithTTL(600*time.Millisecond))
	other := dlock.New(memlock.New(srv))
	l, err := holder.Mutex("x").Lock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // one renewal confirmed
	d.SetPartitioned(true)
	defer d.SetPartitioned(false)
	for {
		l2, err := other.Mutex("x").TryLock(testenv.Context(t, 5*time.Second))
		if err == nil {
			select {
			case <-l.Done():
			default:
				t.Fatal("the server freed the lock while the partitioned holder still believed it held it")
			}
			if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
				t.Errorf("Err = %v, want ErrLeaseLost", l.Err())
			}
			if l2.Token() <= l.Token() {
				t.Errorf("token %d after %d", l2.Token(), l.Token())
			}
			break
		}
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	d.SetPartitioned(false)
	if err := l.Unlock(testenv.Context(t, 5*time.Second)); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Unlock of a lost lease: got %v, want ErrLeaseLost", err)
	}
	if _, err := other.Mutex("x").TryLock(testenv.Context(t, 5*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("Unlock of the lost lease freed the new holder's lock: TryLock got %v", err)
	}
}

func TestRenewalSurvivesShortOutage(t *testing.T) {
	d := memlock.New(memlock.NewServer())
	c := dlock.New(d, dlock.WithTTL(900*time.Millisecond))
	l, err := c.Mutex("x").Lock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// An outage shorter than the time left on the lease: renewals fail,
	// are retried, and the lease survives.
	time.Sleep(100 * time.Millisecond)
	d.SetPartitioned(true)
	time.Sleep(350 * time.Millisecond)
	d.SetPartitioned(false)
	time.Sleep(1200 * time.Millisecond)
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost after a short outage: %v", err)
	}
	if err := l.Unlock(testenv.Context(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func TestLockDelayAppliesOnlyAfterALostHolder(t *testing.T) {
	srv := memlock.NewServer()
	d := memlock.New(srv)
	// Timed from before the holder's grant, whose TTL the Lock below waits
	// out (timed from after it, the wait could be shorter by the time the
	// grant took).
	start := time.Now()
	// A holder that never renews: its lease expires.
	_, err := d.Acquire(testenv.Context(t, 5*time.Second), driver.Request{Name: "x", Owner: strings.Repeat("0", 32), TTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := dlock.New(memlock.New(srv))
	const delay = 400 * time.Millisecond
	l, err := c.Mutex("x", dlock.WithLockDelay(delay)).Lock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond+delay {
		t.Errorf("Lock returned after %v; after a lost holder it must wait out the TTL and the lock-delay %v", waited, delay)
	}
	if err := l.Unlock(testenv.Context(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	// After a clean release there is no delay: a 1-hour lock-delay would
	// make this Lock run out of its 10 s context.
	l, err = c.Mutex("x", dlock.WithLockDelay(time.Hour)).Lock(testenv.Context(t, 10*time.Second))
	if err != nil {
		t.Fatalf("Lock after a clean release waited for the lock-delay: %v", err)
	}
	_ = l.Unlock(testenv.Context(t, 5*time.Second))
}

func TestHooksSeeAcquireReleaseAndLoss(t *testing.T) {
	srv := memlock.NewServer()
	var acquired, released, lost atomic.Int32
	lostCalled := make(chan struct{}, 1)
	c := dlock.New(memlock.New(srv), dlock.WithHooks(dlock.Hooks{
		Acquired: func(string, uint64, time.Duration) { acquired.Add(1) },
		Released: func(string, uint64, time.Duration) { released.Add(1) },
		Lost:     func(string, uint64, error) { lost.Add(1); lostCalled <- struct{}{} },
	}))
	l, err := c.Mutex("x").Lock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(testenv.Context(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	l, err = c.Mutex("x").Lock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Break(testenv.Context(t, 5*time.Second), "x"); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	select { // Done closes before the Lost hook runs
	case <-lostCalled:
	case <-time.After(30 * time.Second):
		t.Fatal("the Lost hook was not called after Break")
	}
	if a, r, lo := acquired.Load(), released.Load(), lost.Load(); a != 2 || r != 1 || lo != 1 {
		t.Errorf("hooks: acquired=%d released=%d lost=%d, want 2 1 1", a, r, lo)
	}
}

func TestCloseReleasesHeldLeases(t *testing.T) {
	srv := memlock.NewServer()
	c := dlock.New(memlock.New(srv))
	l, err := c.Mutex("x").Lock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	if _, err := c.Mutex("y").TryLock(testenv.Context(t, 5*time.Second)); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryLock on a closed client: got %v, want ErrClosed", err)
	}
	other := dlock.New(memlock.New(srv))
	l2, err := other.Mutex("x").TryLock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatalf("Close did not release the held lease: %v", err)
	}
	_ = l2.Unlock(testenv.Context(t, 5*time.Second))
}

func TestDoReturnsLeaseLostEvenWhenFnSucceeds(t *testing.T) {
	srv := memlock.NewServer()
	c := dlock.New(memlock.New(srv))
	admin := dlock.New(memlock.New(srv))
	err := c.Do(testenv.Context(t, 5*time.Second), "x", func(ctx context.Context, l *dlock.Lease) error {
		if err := admin.Break(ctx, "x"); err != nil {
			return err
		}
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), dlock.ErrLeaseLost) {
			t.Errorf("Do context cause = %v, want ErrLeaseLost", context.Cause(ctx))
		}
		return nil // the work "succeeded", but not exclusively
	})
	if !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Do = %v, want ErrLeaseLost", err)
	}
}

func TestOpenErrorsNameTheProblemAndHidePasswords(t *testing.T) {
	ctx := testenv.Context(t, 5*time.Second)
	for _, tc := range []struct{ url, want string }{
		{"nosuch://u:hunter2@h/", `unknown scheme "nosuch"`},
		{"localhost:6379", "unknown scheme"},
		{"", "no scheme"},
		{"mem://x/path", "only mem://"},
	} {
		_, err := dlock.Open(ctx, tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want an error containing %q", tc.url, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q) error shows the password: %v", tc.url, err)
		}
		if !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("Open(%q) error %v is not ErrInvalidOption", tc.url, err)
		}
	}
	if got := dlock.Redact("redis://user:hunter2@h:6379/0"); strings.Contains(got, "hunter2") {
		t.Errorf("Redact left the password: %s", got)
	}
}

func TestOpenMemSharesNamedServer(t *testing.T) {
	ctx := testenv.Context(t, 5*time.Second)
	a, err := dlock.Open(ctx, "mem://shared-test")
	if err != nil {
		t.Fatal(err)
	}
	b, err := dlock.Open(ctx, "mem://shared-test")
	if err != nil {
		t.Fatal(err)
	}
	l, err := a.Mutex("x").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Mutex("x").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("two clients of mem://shared-test do not share locks: %v", err)
	}
	_ = l.Unlock(ctx)
}

func TestFairOnBackendWithoutQueueIsUnsupported(t *testing.T) {
	c := dlock.New(noQueue{memlock.New(memlock.NewServer())})
	_, err := c.Mutex("x", dlock.WithFair()).TryLock(testenv.Context(t, 5*time.Second))
	if !errors.Is(err, dlock.ErrUnsupported) || !strings.Contains(err.Error(), "WithFair") {
		t.Errorf("WithFair on a backend without a queue: got %v, want ErrUnsupported naming WithFair", err)
	}
}

type noQueue struct{ *memlock.Driver }

func (n noQueue) Capabilities() driver.Capabilities {
	c := n.Driver.Capabilities()
	c.Fair = false
	return c
}

// watchingDriver fires a grant's Lost signal when the grant is released,
// as a backend whose watch sees its own key deleted does.
type watchingDriver struct {
	*memlock.Driver
	lost *driver.Signal
}

func (w *watchingDriver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := w.Driver.Acquire(ctx, req)
	g.Lost = w.lost
	return g, err
}

func (w *watchingDriver) Release(ctx context.Context, h driver.Held) error {
	w.lost.Fire()
	time.Sleep(20 * time.Millisecond) // let the watch's signal race the release
	return w.Driver.Release(ctx, h)
}

func TestOwnReleaseSeenByBackendWatchIsNotALoss(t *testing.T) {
	var lost atomic.Int32
	d := &watchingDriver{Driver: memlock.New(memlock.NewServer()), lost: driver.NewSignal()}
	c := dlock.New(d, dlock.WithHooks(dlock.Hooks{Lost: func(string, uint64, error) { lost.Add(1) }}))
	l, err := c.Mutex("x").Lock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(testenv.Context(t, 5*time.Second)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if !errors.Is(l.Err(), dlock.ErrNotHeld) || lost.Load() != 0 {
		t.Errorf("after Unlock: Err = %v, Lost hook called %d times; want ErrNotHeld and no loss", l.Err(), lost.Load())
	}
}

// The Lost hook runs after Done has closed: a hook that waits for Done (to
// see the state every Done-watcher sees) must not wait forever.
func TestLostHookRunsAfterDoneCloses(t *testing.T) {
	srv := memlock.NewServer()
	var lease atomic.Pointer[dlock.Lease]
	sawDone := make(chan bool, 1)
	c := dlock.New(memlock.New(srv), dlock.WithHooks(dlock.Hooks{
		Lost: func(string, uint64, error) {
			select {
			case <-lease.Load().Done():
				sawDone <- true
			case <-time.After(5 * time.Second):
				sawDone <- false
			}
		},
	}))
	l, err := c.Mutex("x").Lock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lease.Store(l)
	if err := c.Break(testenv.Context(t, 5*time.Second), "x"); err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-sawDone:
		if !ok {
			t.Fatal("the Lost hook ran while Done was still open: Done waits for the hook")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the Lost hook was not called after Break")
	}
	if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
		t.Errorf("Err = %v, want ErrLeaseLost", l.Err())
	}
}

// A panic in Do's fn (recovered further up, as HTTP servers do) must not
// leave the lock held: Do releases it, then the panic goes on unchanged.
func TestDoReleasesLockWhenFnPanics(t *testing.T) {
	srv := memlock.NewServer()
	c, other := dlock.New(memlock.New(srv)), dlock.New(memlock.New(srv))
	type boom struct{ n int }
	got := func() (v any) {
		defer func() { v = recover() }()
		_ = c.Do(testenv.Context(t, 5*time.Second), "x", func(context.Context, *dlock.Lease) error {
			panic(boom{42})
		})
		return nil
	}()
	if got != (boom{42}) {
		t.Fatalf("recovered %v from Do, want the fn's own panic value boom{42}", got)
	}
	l, err := other.Mutex("x").TryLock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatalf("TryLock after Do's fn panicked: %v; the lock was left held", err)
	}
	_ = l.Unlock(testenv.Context(t, 5*time.Second))
}

// ctxDriver is a memlock client whose Release fails at once when its
// context has ended, as a network client's does.
type ctxDriver struct{ *memlock.Driver }

func (d ctxDriver) Release(ctx context.Context, h driver.Held) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return d.Driver.Release(ctx, h)
}

// defer l.Unlock(reqCtx) runs after the request's context has ended: the
// lock must still be released, not left held for its TTL.
func TestUnlockWithEndedContextStillReleases(t *testing.T) {
	srv := memlock.NewServer()
	var released atomic.Int32
	c := dlock.New(ctxDriver{memlock.New(srv)}, dlock.WithHooks(dlock.Hooks{
		Released: func(string, uint64, time.Duration) { released.Add(1) },
	}))
	l, err := c.Mutex("x").Lock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with an ended context: %v", err)
	}
	if !errors.Is(l.Err(), dlock.ErrNotHeld) || released.Load() != 1 {
		t.Errorf("after Unlock: Err = %v, Released hook called %d times; want ErrNotHeld and 1", l.Err(), released.Load())
	}
	l2, err := dlock.New(memlock.New(srv)).Mutex("x").TryLock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatalf("TryLock after Unlock with an ended context: %v; the lock was not released", err)
	}
	_ = l2.Unlock(testenv.Context(t, 5*time.Second))
}

// A release that fails is reported as such: Unlock returns the error, the
// Released hook does not run, and the lease is not shown as released. It
// is no longer renewed: it ends (lost) at its deadline unless a retried
// Unlock, or Close, releases it first.
func TestFailedReleaseIsNotReportedAsRelease(t *testing.T) {
	for _, then := range []string{"ExpiresAtDeadline", "RetriedUnlockReleases", "CloseReleases"} {
		t.Run(then, func(t *testing.T) {
			srv := memlock.NewServer()
			d := memlock.New(srv)
			var released, lost atomic.Int32
			c := dlock.New(d, dlock.WithTTL(time.Second), dlock.WithHooks(dlock.Hooks{
				Released: func(string, uint64, time.Duration) { released.Add(1) },
				Lost:     func(string, uint64, error) { lost.Add(1) },
			}))
			l, err := c.Mutex("x").Lock(testenv.Context(t, 5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			d.SetPartitioned(true)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			err = l.Unlock(ctx)
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, dlock.ErrUnavailable) {
				t.Fatalf("Unlock whose release failed: got %v, want the failure", err)
			}
			if released.Load() != 0 || errors.Is(l.Err(), dlock.ErrNotHeld) {
				t.Fatalf("a failed release was reported as one: Released hook called %d times, Err = %v", released.Load(), l.Err())
			}
			if then == "ExpiresAtDeadline" {
				select {
				case <-l.Done():
				case <-time.After(30 * time.Second):
					t.Fatal("Done did not close after a failed release: the lease must end at its deadline")
				}
				if !errors.Is(l.Err(), dlock.ErrLeaseLost) || released.Load() != 0 {
					t.Errorf("after the deadline: Err = %v, Released hook called %d times; want ErrLeaseLost and 0", l.Err(), released.Load())
				}
				return
			}
			d.SetPartitioned(false)
			if then == "CloseReleases" {
				if err := c.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
			} else if err := l.Unlock(testenv.Context(t, 5*time.Second)); err != nil {
				t.Fatalf("retried Unlock: %v", err)
			}
			if !errors.Is(l.Err(), dlock.ErrNotHeld) || released.Load() != 1 || lost.Load() != 0 {
				t.Errorf("after the %s: Err = %v, Released %d, Lost %d; want ErrNotHeld, 1, 0", then, l.Err(), released.Load(), lost.Load())
			}
			l2, err := dlock.New(memlock.New(srv)).Mutex("x").TryLock(testenv.Context(t, 5*time.Second))
			if err != nil {
				t.Fatalf("TryLock after the retried Unlock: %v", err)
			}
			_ = l2.Unlock(testenv.Context(t, 5*time.Second))
		})
	}
}

// stuckRelease is a backend whose releases hang until their context ends,
// as an unreachable server's do; afterAcquire, if set, runs after each
// grant.
type stuckRelease struct {
	*memlock.Driver
	afterAcquire func()
}

func (d *stuckRelease) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := d.Driver.Acquire(ctx, req)
	if err == nil && d.afterAcquire != nil {
		d.afterAcquire()
	}
	return g, err
}

func (d *stuckRelease) Release(ctx context.Context, h driver.Held) error {
	<-ctx.Done()
	return fmt.Errorf("%w: release: %w", driver.ErrUnavailable, ctx.Err())
}

func (d *stuckRelease) Capabilities() driver.Capabilities {
	c := d.Driver.Capabilities()
	c.LockDelay = false // apply the lock-delay after every grant
	return c
}

// The releases Lock makes on its own behalf (a grant it cannot hand over)
// are bounded: a backend that does not answer cannot hang Lock.
func TestLockReturnsWhenItsOwnReleaseHangs(t *testing.T) {
	lock := func(t *testing.T, c *dlock.Client, ctx context.Context, opts ...dlock.Option) error {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			l, err := c.Mutex("x", opts...).Lock(ctx)
			if err == nil {
				err = fmt.Errorf("granted token %d", l.Token())
			}
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(driver.CleanupTimeout + 30*time.Second):
			t.Fatal("Lock did not return: the release it made on its own behalf hangs")
			return nil
		}
	}
	t.Run("ContextEndsDuringLockDelay", func(t *testing.T) {
		c := dlock.New(&stuckRelease{Driver: memlock.New(memlock.NewServer())})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := lock(t, c, ctx, dlock.WithLockDelay(time.Hour)); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Lock whose context ended during the lock-delay: got %v, want DeadlineExceeded", err)
		}
	})
	t.Run("ClientClosedDuringAcquire", func(t *testing.T) {
		d := &stuckRelease{Driver: memlock.New(memlock.NewServer())}
		c := dlock.New(d)
		d.afterAcquire = func() { _ = c.Close() }
		if err := lock(t, c, context.Background()); !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("Lock on a client closed during the acquire: got %v, want ErrClosed", err)
		}
	})
}

// timingOut is a backend whose acquire hits a deadline of its own and
// returns the bare context error, as a database driver's timeout does.
type timingOut struct{ *memlock.Driver }

func (timingOut) Acquire(context.Context, driver.Request) (driver.Grant, error) {
	return driver.Grant{}, fmt.Errorf("query: %w", context.DeadlineExceeded)
}

// A backend's own timeout while the caller's context is live is the
// backend's failure (ErrUnavailable), not the caller's context ending.
func TestBackendTimeoutWithLiveContextIsUnavailable(t *testing.T) {
	c := dlock.New(timingOut{memlock.New(memlock.NewServer())})
	_, err := c.Mutex("x").Lock(testenv.Context(t, time.Minute))
	if !errors.Is(err, dlock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock: got %v, want ErrUnavailable wrapping the backend's DeadlineExceeded", err)
	}
}

type classifiedTimeout struct{ *memlock.Driver }

func (classifiedTimeout) Acquire(context.Context, driver.Request) (driver.Grant, error) {
	return driver.Grant{}, fmt.Errorf("%w: the server did not answer: %w", driver.ErrUnavailable, context.DeadlineExceeded)
}

// A timeout the backend already classified as ErrUnavailable is passed on
// as it is, not wrapped in a second ErrUnavailable.
func TestBackendClassifiedTimeoutIsNotWrappedTwice(t *testing.T) {
	c := dlock.New(classifiedTimeout{memlock.New(memlock.NewServer())})
	_, err := c.Mutex("x").Lock(testenv.Context(t, time.Minute))
	if !errors.Is(err, dlock.ErrUnavailable) || strings.Count(err.Error(), dlock.ErrUnavailable.Error()) != 1 {
		t.Errorf("Lock: got %q, want ErrUnavailable named once", err)
	}
}

// rawInspect is a third-party backend that returns its engine's errors
// raw, unclassified.
type rawInspect struct {
	*memlock.Driver
	err error
}

func (r rawInspect) Inspect(context.Context, string) (driver.Info, error) {
	return driver.Info{}, r.err
}

// The portable layer holds a driver that does not classify its errors to
// the contract: a raw failure is ErrUnavailable while the caller waits,
// the caller's context error once it has ended; an answer stays.
func TestRawDriverErrorsAreClassified(t *testing.T) {
	refused := errors.New("dial tcp 127.0.0.1:1: connection refused")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		err     error
		want    error
		notWant error
	}{
		{"FailureWhileCallerWaits", testenv.Context(t, time.Minute), refused, dlock.ErrUnavailable, context.Canceled},
		{"FailureAfterCallerGaveUp", cancelled, refused, context.Canceled, dlock.ErrUnavailable},
		{"Answer", cancelled, fmt.Errorf("%w: gone", driver.ErrNotHeld), dlock.ErrNotHeld, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dlock.New(rawInspect{memlock.New(memlock.NewServer()), tc.err})
			_, err := c.Inspect(tc.ctx, "x")
			if !errors.Is(err, tc.want) || errors.Is(err, tc.notWant) {
				t.Errorf("Inspect: got %v, want %v and not %v", err, tc.want, tc.notWant)
			}
		})
	}
}

// Unlock of a lease already lost frees the backend's entry as a clean-up;
// a backend that does not answer cannot make it hang, whatever ctx.
func TestUnlockOfLostLeaseReturnsWhenReleaseHangs(t *testing.T) {
	srv := memlock.NewServer()
	c := dlock.New(&stuckRelease{Driver: memlock.New(srv)})
	l, err := c.Mutex("x").Lock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := dlock.New(memlock.New(srv)).Break(testenv.Context(t, 5*time.Second), "x"); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	done := make(chan error, 1)
	go func() { done <- l.Unlock(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, dlock.ErrLeaseLost) {
			t.Errorf("Unlock of a lost lease: got %v, want ErrLeaseLost", err)
		}
	case <-time.After(driver.CleanupTimeout + 30*time.Second):
		t.Fatal("Unlock of a lost lease hangs on a release that does not answer")
	}
}

// Unlock with a nil context is bad input: an error naming it, no panic,
// and the lease still held so that a correct Unlock releases it.
func TestUnlockWithNilContextIsAnErrorNotAPanic(t *testing.T) {
	c := dlock.New(memlock.New(memlock.NewServer()))
	l, err := c.Mutex("x").Lock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	if err := l.Unlock(nil); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("Unlock(nil): got %v, want ErrInvalidOption", err)
	}
	if err := l.Unlock(testenv.Context(t, 5*time.Second)); err != nil {
		t.Errorf("Unlock after Unlock(nil): %v", err)
	}
}

// failingWatchedRelease fires the grant's Lost signal during a release
// that then fails, as a backend whose watch saw the lock vanish while the
// release's reply was lost.
type failingWatchedRelease struct {
	*memlock.Driver
	lost *driver.Signal
}

func (w *failingWatchedRelease) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := w.Driver.Acquire(ctx, req)
	g.Lost = w.lost
	return g, err
}

func (w *failingWatchedRelease) Release(ctx context.Context, h driver.Held) error {
	w.lost.Fire()
	time.Sleep(20 * time.Millisecond) // let the signal arrive while the release is in flight
	return fmt.Errorf("%w: the reply was lost", driver.ErrUnavailable)
}

// A loss the backend signals while a release is in flight is not taken
// for the release itself once that release fails: the lease ends as lost
// at once, rather than living on unrenewed until its deadline.
func TestLossDuringFailedReleaseEndsTheLease(t *testing.T) {
	d := &failingWatchedRelease{Driver: memlock.New(memlock.NewServer()), lost: driver.NewSignal()}
	c := dlock.New(d, dlock.WithTTL(time.Hour))
	l, err := c.Mutex("x").Lock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(testenv.Context(t, 5*time.Second)); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Unlock: got %v, want ErrUnavailable", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("the backend signalled the loss during the failed release, but the lease is still held")
	}
	if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
		t.Errorf("Err = %v, want ErrLeaseLost", l.Err())
	}
}

// hangingExtend is a backend whose first Extend hangs until its context
// ends, as a request sent to a server cut from its cluster does, while
// later Extends (a retry, to a healthy server) are answered.
type hangingExtend struct {
	*memlock.Driver
	calls atomic.Int32
}

func (d *hangingExtend) Extend(ctx context.Context, h driver.Held, ttl time.Duration) error {
	if d.calls.Add(1) == 1 {
		<-ctx.Done()
		return fmt.Errorf("%w: extend: %w", driver.ErrUnavailable, ctx.Err())
	}
	return d.Driver.Extend(ctx, h, ttl)
}

// One renewal that hangs does not cost the lease: each attempt is bounded
// well within the deadline, and the retry renews it.
func TestRenewalThatHangsIsRetriedBeforeTheDeadline(t *testing.T) {
	d := &hangingExtend{Driver: memlock.New(memlock.NewServer())}
	const ttl = 900 * time.Millisecond
	c := dlock.New(d, dlock.WithTTL(ttl))
	l, err := c.Mutex("x").Lock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
		t.Fatalf("lease lost after one renewal hung (%d Extend calls): %v", d.calls.Load(), l.Err())
	case <-time.After(2 * ttl):
	}
	if n := d.calls.Load(); n < 2 {
		t.Fatalf("%d Extend calls in two TTLs: the hung renewal was not retried", n)
	}
	if err := l.Unlock(testenv.Context(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// A semaphore's number of permits is checked before any I/O, with an error
// naming the rule; more than one permit on a backend without semaphores is
// ErrUnsupported.
func TestSemaphorePermitsOutOfRangeAreInvalid(t *testing.T) {
	ctx := context.Background()
	c := dlock.New(memlock.New(memlock.NewServer()))
	defer c.Close()
	for _, n := range []int{0, -1, dlock.MaxPermits + 1} {
		_, err := c.Semaphore("s", n).Acquire(ctx)
		if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "number of permits must be 1..") {
			t.Errorf("Semaphore(s, %d): got %v, want ErrInvalidOption naming the rule", n, err)
		}
	}
	noSem := dlock.New(withoutSemaphore{memlock.New(memlock.NewServer())})
	defer noSem.Close()
	if _, err := noSem.Semaphore("s", 2).TryAcquire(ctx); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("Semaphore of 2 without Capabilities.Semaphore: got %v, want ErrUnsupported", err)
	}
	l, err := noSem.Semaphore("s", 1).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("Semaphore of 1 (the mutex) without Capabilities.Semaphore: %v", err)
	}
	l.Unlock(ctx)
}

// withoutSemaphore is a driver that does not claim semaphores.
type withoutSemaphore struct{ *memlock.Driver }

func (d withoutSemaphore) Capabilities() driver.Capabilities {
	caps := d.Driver.Capabilities()
	caps.Semaphore = false
	return caps
}
