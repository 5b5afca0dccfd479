package etcdlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock/dlock"
)

func TestLockUnlockTokensIncrease(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	c := newLocker(t, srv.Endpoints(), dlock.WithTTL(2*time.Second))
	var last uint64
	for i := range 3 {
		l, err := c.Mutex("a/b").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("grant %d: token %d after %d", i, l.Token(), last)
		}
		last = l.Token()
		if l.TTL() != 2*time.Second {
			t.Errorf("TTL = %v, want 2s", l.TTL())
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTryLockHeldLeavesNoKey(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	a := newLocker(t, srv.Endpoints())
	b := newLocker(t, srv.Endpoints())
	l, err := a.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Mutex("x").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of a held lock: %v, want ErrNotAcquired", err)
	}
	info, err := b.Inspect(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Token != l.Token() || len(info.Waiters) != 0 {
		t.Fatalf("Inspect after a failed TryLock = %+v; want held by token %d, no waiters", info, l.Token())
	}
}
