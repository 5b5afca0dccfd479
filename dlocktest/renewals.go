package dlocktest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// FailedRenewals wraps a driver and counts the renewals (Extend calls)
// that returned an error, so that a test can keep a server down until a
// holder's renewal has met the outage.
type FailedRenewals struct {
	driver.Driver
	n atomic.Int32
}

// Extend implements driver.Driver.
func (f *FailedRenewals) Extend(ctx context.Context, h driver.Held, ttl time.Duration) error {
	err := f.Driver.Extend(ctx, h, ttl)
	if err != nil {
		f.n.Add(1)
	}
	return err
}

// Count returns how many renewals have failed so far.
func (f *FailedRenewals) Count() int { return int(f.n.Load()) }

// HolderKeepsLockAcrossOutage checks a backend's claim that a holder keeps
// its lock across a server outage shorter than its lease: with l held by a
// client over renewals, down takes the server away, and once a renewal has
// failed, up brings it back. l must then be renewed, not lost; other must
// find the lock held, with l's token; and l's Unlock must succeed.
func HolderKeepsLockAcrossOutage(t *testing.T, l *dlock.Lease, renewals *FailedRenewals, other *dlock.Client, down, up func()) {
	t.Helper()
	down()
	downAt := time.Now()
	testenv.Eventually(t, l.TTL(), "a renewal to fail while the server is down", func() error {
		if renewals.Count() == 0 {
			return errors.New("no failed renewal yet")
		}
		return nil
	})
	t.Logf("first failed renewal %v after the server went down", time.Since(downAt).Round(time.Millisecond))
	up()
	upAt := time.Now()
	testenv.Eventually(t, l.TTL(), "a renewal confirmed after the server came back", func() error {
		select {
		case <-l.Done():
			t.Fatalf("the holder lost its lock across an outage shorter than its lease: %v", l.Err())
		default:
		}
		if !l.Expires().After(upAt.Add(l.TTL() / 2)) {
			return errors.New("no renewal since the server came back")
		}
		return nil
	})
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := other.Mutex(l.Name()).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock by another client after the outage: got %v, want ErrNotAcquired", err)
	}
	in, err := other.Inspect(ctx, l.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !in.Held || in.Token != l.Token() {
		t.Fatalf("Inspect after the outage: held=%v token=%d, want held with token %d", in.Held, in.Token, l.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after the outage: %v", err)
	}
}
