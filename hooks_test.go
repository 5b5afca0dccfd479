package dlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/memlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// lossRecorder is a Lost hook that hands the cause of each loss over.
type lossRecorder chan error

func (r lossRecorder) hooks() dlock.Hooks {
	return dlock.Hooks{Lost: func(_ string, _ uint64, cause error) { r <- cause }}
}

func (r lossRecorder) next(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("no loss reported in 30s")
		return nil
	}
}

func TestLossCauseOfBreakIsBroken(t *testing.T) {
	srv := memlock.NewServer()
	lost := make(lossRecorder, 1)
	c := dlock.New(memlock.New(srv), dlock.WithHooks(lost.hooks()))
	l, err := c.Mutex("x").Lock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Break(testenv.Context(t, 5*time.Second), "x"); err != nil {
		t.Fatal(err)
	}
	cause := lost.next(t)
	if got := dlock.LossCause(cause); got != dlock.LossBroken {
		t.Errorf("LossCause(%v) = %q, want %q", cause, got, dlock.LossBroken)
	}
	if got := dlock.LossCause(l.Err()); got != dlock.LossBroken {
		t.Errorf("LossCause(Lease.Err()) = %q, want %q", got, dlock.LossBroken)
	}
	if err := l.Unlock(testenv.Context(t, 5*time.Second)); dlock.LossCause(err) != dlock.LossBroken {
		t.Errorf("Unlock after the break: LossCause(%v) = %q, want %q", err, dlock.LossCause(err), dlock.LossBroken)
	}
}

func TestLossCauseOfPartitionIsUnreachable(t *testing.T) {
	d := memlock.New(memlock.NewServer())
	lost := make(lossRecorder, 1)
	var failed, renewed countingHook
	h := lost.hooks()
	h.RenewalFailed = func(_ string, _ uint64, err error) {
		if !errors.Is(err, dlock.ErrUnavailable) {
			t.Errorf("RenewalFailed got %v, want ErrUnavailable", err)
		}
		failed.add()
	}
	h.Renewed = func(string, uint64, time.Duration) { renewed.add() }
	c := dlock.New(d, dlock.WithTTL(300*time.Millisecond), dlock.WithHooks(h))
	if _, err := c.Mutex("x").Lock(testenv.Context(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	d.SetPartitioned(true)
	defer d.SetPartitioned(false)
	cause := lost.next(t)
	if got := dlock.LossCause(cause); got != dlock.LossUnreachable {
		t.Errorf("LossCause(%v) = %q, want %q", cause, got, dlock.LossUnreachable)
	}
	if failed.n() == 0 {
		t.Error("the lease was lost to a partition, but RenewalFailed was never called")
	}
}

// pausedDriver grants leases whose TTL had run out by the time the grant
// was processed, and refuses their renewal, as a holder paused past its
// TTL right after the grant sees it: the loss is the holder's lateness,
// not the backend's absence nor a break.
type pausedDriver struct{ *memlock.Driver }

func (d pausedDriver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := d.Driver.Acquire(ctx, req)
	g.Since = driver.Now().Add(-2 * req.TTL)
	return g, err
}

// Extend honours its context as a network client does: a renewal whose
// deadline has passed fails at once, without an answer.
func (pausedDriver) Extend(ctx context.Context, _ driver.Held, _ time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return driver.ErrLeaseLost
}

func TestLossCauseOfAPausedHolderIsExpired(t *testing.T) {
	wantLossCause(t, pausedDriver{memlock.New(memlock.NewServer())}, dlock.LossExpired)
}

// wantLossCause takes a lock of d with a 300ms TTL and checks the cause of
// its loss.
func wantLossCause(t *testing.T, d driver.Driver, want string) {
	t.Helper()
	lost := make(lossRecorder, 1)
	c := dlock.New(d, dlock.WithTTL(300*time.Millisecond), dlock.WithHooks(lost.hooks()))
	if _, err := c.Mutex("x").Lock(testenv.Context(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	cause := lost.next(t)
	if got := dlock.LossCause(cause); got != want {
		t.Errorf("LossCause(%v) = %q, want %q", cause, got, want)
	}
}

// slowDriver answers a renewal only after the lease's deadline: the
// backend did not answer in time, which is unreachability.
type slowDriver struct{ *memlock.Driver }

func (slowDriver) Extend(context.Context, driver.Held, time.Duration) error {
	time.Sleep(time.Second)
	return driver.ErrLeaseLost
}

func TestLossCauseOfARenewalUnansweredAtTheDeadlineIsUnreachable(t *testing.T) {
	wantLossCause(t, slowDriver{memlock.New(memlock.NewServer())}, dlock.LossUnreachable)
}

// sessionDriver ends every grant's session on demand, as a ZooKeeper
// session expiry does.
type sessionDriver struct {
	*memlock.Driver
	lost *driver.Signal
}

func (d sessionDriver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := d.Driver.Acquire(ctx, req)
	g.Lost = d.lost
	return g, err
}

func TestLossCauseOfAnEndedSessionIsSessionLost(t *testing.T) {
	d := sessionDriver{memlock.New(memlock.NewServer()), driver.NewSignal()}
	lost := make(lossRecorder, 1)
	c := dlock.New(d, dlock.WithHooks(lost.hooks()))
	if _, err := c.Mutex("x").Lock(testenv.Context(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	d.lost.FireCause(driver.ErrSessionLost)
	cause := lost.next(t)
	if got := dlock.LossCause(cause); got != dlock.LossSessionLost {
		t.Errorf("LossCause(%v) = %q, want %q", cause, got, dlock.LossSessionLost)
	}
	if dlock.LossCause(errors.New("other")) != "" || dlock.LossCause(nil) != "" {
		t.Error("LossCause of an error that is not a loss is not empty")
	}
}

type countingHook struct {
	mu    sync.Mutex
	count int
}

func (c *countingHook) add() { c.mu.Lock(); c.count++; c.mu.Unlock() }
func (c *countingHook) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count
}

// The TTL is 1s: with 150ms (a renewal every 50ms, due within 150ms) the
// race-built test failed 2 runs in 100 on a loaded machine.
func TestHooksSeeEachFailedAcquireAndRenewal(t *testing.T) {
	srv := memlock.NewServer()
	var mu sync.Mutex
	var failures []error
	var renewed countingHook
	c := dlock.New(memlock.New(srv), dlock.WithTTL(time.Second), dlock.WithHooks(dlock.Hooks{
		AcquireFailed: func(_ string, _ time.Duration, err error) {
			mu.Lock()
			failures = append(failures, err)
			mu.Unlock()
		},
		Renewed: func(_ string, _ uint64, rtt time.Duration) {
			if rtt < 0 {
				t.Errorf("Renewed with a negative round trip %v", rtt)
			}
			renewed.add()
		},
	}))
	l, err := c.Mutex("x").Lock(testenv.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mutex("x").TryLock(testenv.Context(t, 5*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of a held lock: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Mutex("x").Lock(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock until a deadline: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, "a renewal reported", func() error {
		if renewed.n() == 0 {
			return errors.New("no Renewed call")
		}
		return nil
	})
	_ = l.Unlock(testenv.Context(t, 5*time.Second))
	mu.Lock()
	defer mu.Unlock()
	if len(failures) != 2 || !errors.Is(failures[0], dlock.ErrNotAcquired) || !errors.Is(failures[1], context.DeadlineExceeded) {
		t.Errorf("AcquireFailed saw %v, want ErrNotAcquired then DeadlineExceeded", failures)
	}
}

type ctxKey struct{}

// Attempt receives the caller's context and its hooks replace the
// client's for that attempt and its lease.
func TestAttemptHooksSeeCallersContext(t *testing.T) {
	srv := memlock.NewServer()
	var mu sync.Mutex
	var events []string
	record := func(e string) { mu.Lock(); events = append(events, e); mu.Unlock() }
	c := dlock.New(memlock.New(srv), dlock.WithHooks(dlock.Hooks{
		Acquired: func(string, uint64, time.Duration) { record("client acquired") },
		Attempt: func(ctx context.Context, a dlock.LockAttempt) *dlock.Hooks {
			v, _ := ctx.Value(ctxKey{}).(string)
			if a.Name != "x" || !a.Wait || a.TTL != dlock.DefaultTTL {
				t.Errorf("Attempt got %+v, want Lock of x with the default TTL", a)
			}
			return &dlock.Hooks{
				Acquired: func(string, uint64, time.Duration) { record("acquired " + v) },
				Released: func(string, uint64, time.Duration) { record("released " + v) },
			}
		},
	}))
	ctx := context.WithValue(testenv.Context(t, 5*time.Second), ctxKey{}, "in ctx")
	l, err := c.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || events[0] != "acquired in ctx" || events[1] != "released in ctx" {
		t.Errorf("hooks saw %q, want the attempt's acquired and released, with the caller's context", events)
	}
}
