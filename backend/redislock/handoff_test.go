package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/internal/testenv"
)

// waitProcChannels waits until n process channels are subscribed on the
// server at addr.
func waitProcChannels(t *testing.T, addr string, n int) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, fmt.Sprintf("%d process channels subscribed", n), func() error {
		if got := procChannels(t, addr); got != n {
			return fmt.Errorf("%d subscribed", got)
		}
		return nil
	})
}

// A waiter's attempt that finds the lock free with a dead waiter first in
// line serves the queue itself; when every waiter before it is dead, the
// hand-off reaches the caller itself. The attempt must then report the
// grant rather than queue the caller again: a queued holder's release
// would hand the lock to its own owner key, whose process no longer waits
// for it, and the lock would stay held by nobody for a whole TTL.
//
// The dead waiter is a client behind a proxy that is cut and blocked: its
// place in the queue lives on (waiter TTL 1m), its process channel has no
// subscriber any more, and its lease (TTL 1s) expires on the server
// without a release, so that the next attempt finds the lock free.
func TestAttemptHandedTheLockItselfIsGranted(t *testing.T) {
	srv := testenv.StartRedis(t)
	proxy := testenv.NewProxy(t, srv.Addr)
	ctx := testenv.Context(t, time.Minute)
	const name = "fair/self-handoff"
	ghost := open(t, "redis://"+proxy.Addr()+"?waiter_ttl=1m", dlock.WithFair())
	c := open(t, "redis://"+srv.Addr, dlock.WithFair(), dlock.WithTTL(time.Minute))

	held, err := ghost.Mutex(name, dlock.WithTTL(time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gctx, gcancel := context.WithCancel(ctx)
	defer gcancel()
	go func() {
		if l, err := ghost.Mutex(name).Lock(gctx); err == nil {
			_ = l.Unlock(ctx)
		}
	}()
	waitWaiters(t, c, name, 1)
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := c.Mutex(name).Lock(ctx)
		if err != nil {
			t.Errorf("Lock behind a dead waiter: %v", err)
		}
		got <- l
	}()
	waitWaiters(t, c, name, 2)

	proxy.Block()
	proxy.Cut()
	waitProcChannels(t, srv.Addr, 1)

	l := <-got
	if l == nil {
		t.FailNow()
	}
	if l.Token() <= held.Token() {
		t.Errorf("token %d, want > %d", l.Token(), held.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	in, err := c.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if in.Held {
		t.Errorf("after the only live holder released: held with token %d (expires in %v), want free", in.Token, in.ExpiresIn)
	}
	next, err := c.Mutex(name).TryLock(ctx)
	if errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatal("TryLock after the release: the lock is still held")
	} else if err != nil {
		t.Fatal(err)
	}
	_ = next.Unlock(ctx)
}

// A hand-off message that arrives late — after the lock was broken and
// granted to someone else — must not be taken as a grant: the waiter
// checks with the server that the lock is still its own. Here the
// waiter's connections go through a proxy that holds the message back
// while the holder releases (handing the lock to the waiter), an admin
// breaks the lock, and another client takes it.
func TestLateHandoffAfterBreakIsNotAccepted(t *testing.T) {
	srv := testenv.StartRedis(t)
	proxy := testenv.NewProxy(t, srv.Addr)
	ctx := testenv.Context(t, time.Minute)
	const name = "fair/late-handoff"
	c := open(t, "redis://"+srv.Addr, dlock.WithTTL(time.Minute))
	waiter := open(t, "redis://"+proxy.Addr()+"?waiter_ttl=1m", dlock.WithFair(), dlock.WithTTL(time.Minute))

	holder, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := waiter.Mutex(name).Lock(ctx)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	waitWaiters(t, c, name, 1)

	proxy.Block()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if in, err := c.Inspect(ctx, name); err != nil || !in.Held || in.Token <= holder.Token() {
		t.Fatalf("after the release: held=%v token=%d, %v; want handed to the waiter", in.Held, in.Token, err)
	}
	if err := c.Break(ctx, name); err != nil {
		t.Fatal(err)
	}
	other, err := c.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after Break: %v", err)
	}
	proxy.Unblock()

	// The waiter either (wrongly) returns a lease, or queues again behind
	// the new holder.
	testenv.Eventually(t, 30*time.Second, "the waiter to queue again", func() error {
		select {
		case l := <-got:
			if l != nil {
				t.Fatalf("the waiter took a late hand-off: token %d while another client holds token %d", l.Token(), other.Token())
			}
			t.FailNow()
		default:
		}
		in, err := c.Inspect(ctx, name)
		if err == nil && len(in.Waiters) != 1 {
			err = fmt.Errorf("%d waiters, and the waiter has not returned", len(in.Waiters))
		}
		return err
	})
	if err := other.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if l.Token() <= other.Token() {
		t.Errorf("the waiter's token %d, want > %d", l.Token(), other.Token())
	}
	_ = l.Unlock(ctx)
}
