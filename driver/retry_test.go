package driver

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeEngine is a try-only lock for unit tests of AcquireByRetry.
type fakeEngine struct {
	mu       sync.Mutex
	holder   string
	token    uint64
	attempts int
	delay    time.Duration // how long each attempt takes
	wake     chan struct{}
	released []string
}

func (f *fakeEngine) TryAcquire(ctx context.Context, req Request) (Grant, time.Duration, error) {
	time.Sleep(f.delay)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if f.holder != "" {
		return Grant{}, time.Hour, ErrNotAcquired
	}
	f.holder = req.Owner
	f.token++
	return Grant{Token: f.token}, 0, nil
}

func (f *fakeEngine) Release(ctx context.Context, h Held) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holder != h.Owner {
		return ErrLeaseLost
	}
	f.holder = ""
	f.released = append(f.released, h.Owner)
	if f.wake != nil {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

type pushEngine struct{ *fakeEngine }

func (p pushEngine) Subscribe(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return p.wake, func() {}, nil
}

func TestAcquireByRetryWakesOnPushNotPoll(t *testing.T) {
	f := &fakeEngine{holder: "other", wake: make(chan struct{}, 1)}
	done := make(chan error, 1)
	go func() {
		_, err := AcquireByRetry(context.Background(), Request{Name: "x", Owner: "me", TTL: time.Minute, Wait: true}, pushEngine{f})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	_ = f.Release(context.Background(), Held{Owner: "other"})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(safetyPoll / 2):
		t.Fatal("a waiter with a push wake-up was not woken by the release")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.attempts != 2 {
		t.Errorf("%d attempts, want 2 (one before the release, one after its wake-up)", f.attempts)
	}
}

// A cancelled acquire gives back a grant that raced with the cancel before
// it returns: a process that exits right after leaves no lock held.
func TestAcquireByRetryCancelledMidAttemptReleasesLateGrantBeforeReturning(t *testing.T) {
	f := &fakeEngine{delay: 200 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := AcquireByRetry(ctx, Request{Name: "x", Owner: "me", TTL: time.Minute, Wait: true}, f)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	f.mu.Lock()
	holder, attempts, released := f.holder, f.attempts, len(f.released)
	f.mu.Unlock()
	if attempts != 1 || holder != "" || released != 1 {
		t.Fatalf("when AcquireByRetry returned: %d attempts, holder %q, %d releases; want the late grant given back (1, \"\", 1)", attempts, holder, released)
	}
}

// hangingEngine never answers an attempt before its context ends.
type hangingEngine struct{}

func (hangingEngine) TryAcquire(ctx context.Context, req Request) (Grant, time.Duration, error) {
	<-ctx.Done()
	return Grant{}, 0, ctx.Err()
}

func (hangingEngine) Release(ctx context.Context, h Held) error { return nil }

// An attempt cut off by its own deadline while the caller still waits is
// the backend's failure to answer: ErrUnavailable, not a bare context
// error that reads as the caller's.
func TestAcquireByRetryAttemptTimeoutIsUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := AcquireByRetry(ctx, Request{Name: "x", Owner: "me", TTL: time.Millisecond, Wait: true}, hangingEngine{})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrUnavailable wrapping the attempt's DeadlineExceeded", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the caller's context ended first (%v): the test proves nothing", ctx.Err())
	}
}

func TestAcquireByRetryWithoutWaitTriesOnce(t *testing.T) {
	f := &fakeEngine{holder: "other"}
	_, err := AcquireByRetry(context.Background(), Request{Name: "x", Owner: "me", TTL: time.Minute}, f)
	if !errors.Is(err, ErrNotAcquired) || f.attempts != 1 {
		t.Fatalf("got %v after %d attempts, want ErrNotAcquired after 1", err, f.attempts)
	}
}

func TestJitterStaysInRange(t *testing.T) {
	for range 1000 {
		if j := Jitter(100 * time.Millisecond); j < 50*time.Millisecond || j > 100*time.Millisecond {
			t.Fatalf("Jitter(100ms) = %v", j)
		}
	}
}

// A waiter behind a lease that runs out looks again just after it, not
// jittered (a jittered look lands early, nearer each time, until one reads
// the remaining time as 0, which once cost a Redis writer a whole
// heartbeat, 53s, in CI); a lease that runs out now (0, or read as just
// gone) is looked at in a millisecond; without one, or past the
// heartbeat, the heartbeat is jittered.
func TestLookAgain(t *testing.T) {
	const hb = time.Minute
	for _, c := range []struct {
		left    time.Duration
		expires bool
		want    time.Duration
	}{
		{0, true, time.Millisecond},
		{-3 * time.Millisecond, true, time.Millisecond},
		{250 * time.Millisecond, true, 251 * time.Millisecond},
	} {
		if got := LookAgain(hb, c.left, c.expires); got != c.want {
			t.Errorf("LookAgain(%v, %v, %v) = %v, want %v", hb, c.left, c.expires, got, c.want)
		}
	}
	for _, c := range []struct {
		left    time.Duration
		expires bool
	}{{0, false}, {-time.Millisecond, false}, {2 * time.Minute, true}} {
		if got := LookAgain(hb, c.left, c.expires); got < hb/2 || got > hb {
			t.Errorf("LookAgain(%v, %v, %v) = %v, want the heartbeat jittered, in [%v, %v]", hb, c.left, c.expires, got, hb/2, hb)
		}
	}
}

func TestGiveBackIfEndedReleasesOnlyAGrantWhoseContextEnded(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	refused := errors.New("refused")
	for _, c := range []struct {
		name     string
		ctx      context.Context
		err      error
		released bool
		want     error
	}{
		{"granted, context live", context.Background(), nil, false, nil},
		{"granted, context ended", ended, nil, true, context.Canceled},
		{"refused, context ended", ended, refused, false, refused},
		{"refused, context live", context.Background(), refused, false, refused},
	} {
		released := false
		in := Grant{}
		if c.err == nil {
			in.Token = 7
		}
		g, err := GiveBackIfEnded(c.ctx, in, c.err, func(rctx context.Context) {
			released = true
			if rctx.Err() != nil {
				t.Errorf("%s: the release's context has ended already: %v", c.name, rctx.Err())
			}
			if _, ok := rctx.Deadline(); !ok {
				t.Errorf("%s: the release's context has no deadline", c.name)
			}
		})
		if released != c.released || !errors.Is(err, c.want) || (c.want == nil) != (g.Token == 7) {
			t.Errorf("%s: released %v, grant %d, err %v; want released %v, err %v", c.name, released, g.Token, err, c.released, c.want)
		}
	}
}
