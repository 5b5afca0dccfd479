package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/etcdlock"
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

func TestBreakIsNoticedByTheHolderAtOnce(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	const ttl = 30 * time.Second // first renewal after 10 s
	holder := newLocker(t, srv.Endpoints(), dlock.WithTTL(ttl))
	l, err := holder.Mutex("broken").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := newLocker(t, srv.Endpoints()).Break(ctx, "broken"); err != nil {
		t.Fatal(err)
	}
	// The watch on the holder's own key reports the Break; a renewal
	// would only notice it after ttl/3.
	select {
	case <-l.Done():
		if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
			t.Fatalf("Err after Break = %v, want ErrLeaseLost", l.Err())
		}
	case <-time.After(ttl/3 - 2*time.Second):
		t.Fatal("the holder did not notice the Break before its first renewal")
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Unlock after Break = %v, want ErrLeaseLost", err)
	}
}

func TestTTLIsRoundedUpToWholeSeconds(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	l, err := newLocker(t, srv.Endpoints(), dlock.WithTTL(2500*time.Millisecond)).Mutex("ttl").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.TTL() != 3*time.Second {
		t.Errorf("TTL = %v, want 3s (2.5s rounded up)", l.TTL())
	}
	// etcd grants no lease shorter than 1.5 election timeouts (2 s here):
	// the grant reports the longer TTL it got.
	l2, err := newLocker(t, srv.Endpoints(), dlock.WithTTL(time.Second)).Mutex("ttl-short").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l2.TTL() != 2*time.Second {
		t.Errorf("TTL for 1s = %v, want the server's minimum 2s", l2.TTL())
	}
}

// TestQueueHoldsOnlyLiveEntries checks the keys themselves: a waiter that
// gives up and a TryLock that fails leave no key; Inspect lists waiters in
// arrival order with their metadata.
func TestQueueHoldsOnlyLiveEntries(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	eps := srv.Endpoints()
	raw := newClient(t, eps)
	keys := func() int64 {
		resp, err := raw.Get(ctx, etcdlock.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	holder := newLocker(t, eps)
	l, err := holder.Mutex("q").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newLocker(t, eps).Mutex("q").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock: %v", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { _, err := newLocker(t, eps).Mutex("q").Lock(wctx); gaveUp <- err }()
	waitWaiters(t, holder, "q", 1)
	type granted struct {
		l   *dlock.Lease
		err error
	}
	later := make([]chan granted, 2)
	for i := range later {
		later[i] = make(chan granted, 1)
		c := newLocker(t, eps, dlock.WithNote(fmt.Sprint("waiter ", i)))
		go func() { l, err := c.Mutex("q").Lock(ctx); later[i] <- granted{l, err} }()
		waitWaiters(t, holder, "q", i+2)
	}
	if n := keys(); n != 4 {
		t.Fatalf("%d keys with a holder and three waiters, want 4", n)
	}
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if n := keys(); n != 3 {
		t.Fatalf("%d keys after a waiter gave up, want 3", n)
	}
	in, err := holder.Inspect(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Waiters) != 2 || in.Waiters[0].Note != "waiter 0" || in.Waiters[1].Note != "waiter 1" {
		t.Fatalf("Inspect waiters = %+v, want waiter 0 then waiter 1", in.Waiters)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for i, ch := range later {
		g := <-ch
		if g.err != nil {
			t.Fatalf("waiter %d: %v", i, g.err)
		}
		if err := g.l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := keys(); n != 0 {
		t.Fatalf("%d keys after everyone released, want 0", n)
	}
}

// TestWaiterWhoseEntryWasDeletedIsNotGranted: a waiter whose own queue
// entry goes while it waits (deleted by hand here; a lease that lapsed
// while the server was unreachable does the same) is not granted the lock
// when the holder releases, although nothing is ahead of it any more: its
// Lock fails with ErrUnavailable, and the lock is free for the next comer.
func TestWaiterWhoseEntryWasDeletedIsNotGranted(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	eps := srv.Endpoints()
	raw := newClient(t, eps)
	holder := newLocker(t, eps)
	l, err := holder.Mutex("entry").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		wl, err := newLocker(t, eps).Mutex("entry").Lock(ctx)
		if err == nil {
			_ = wl.Unlock(ctx)
			err = fmt.Errorf("granted token %d", wl.Token())
		}
		waited <- err
	}()
	waitWaiters(t, holder, "entry", 1)
	newest, err := raw.Get(ctx, etcdlock.DefaultPrefix, clientv3.WithLastCreate()...)
	if err != nil || len(newest.Kvs) != 1 {
		t.Fatalf("the waiter's key: %v, %v", newest, err)
	}
	if _, err := raw.Delete(ctx, string(newest.Kvs[0].Key)); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Lock of the waiter whose entry was deleted: %v, want ErrUnavailable", err)
	}
	l2, err := newLocker(t, eps).Mutex("entry").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the waiter failed: %v", err)
	}
	_ = l2.Unlock(ctx)
}

func TestListFindsNamesByPrefix(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	c := newLocker(t, srv.Endpoints())
	names := []string{"a", "a/", "a/b", "a%2F", "a\x00", "ab", "b/a", "ä/ö"}
	for _, n := range names {
		if _, err := c.Mutex(n).Lock(ctx); err != nil {
			t.Fatalf("Lock(%q): %v", n, err)
		}
	}
	for prefix, want := range map[string][]string{
		"":      {"a", "a\x00", "a%2F", "a/", "a/b", "ab", "b/a", "ä/ö"},
		"a/":    {"a/", "a/b"},
		"a%":    {"a%2F"},
		"a\x00": {"a\x00"},
		"ä":     {"ä/ö"},
		"c":     nil,
	} {
		list, err := c.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, in := range list {
			got = append(got, in.Name)
			if !in.Held || in.Token == 0 || in.ExpiresIn <= 0 {
				t.Errorf("List(%q): %+v, want held with a token and an expiry", prefix, in)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("List(%q) = %q, want %q", prefix, got, want)
		}
	}
}

// TestRevokedLeaseIsReplaced revokes, behind the driver's back, the lease
// it keeps from a released lock for reuse: the next Lock takes a new one.
func TestRevokedLeaseIsReplaced(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	c := newLocker(t, srv.Endpoints())
	l, err := c.Mutex("revoked").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	raw := newClient(t, srv.Endpoints())
	leases, err := raw.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(leases.Leases) == 0 {
		t.Fatal("no lease kept after the release")
	}
	for _, ls := range leases.Leases {
		if _, err := raw.Revoke(ctx, ls.ID); err != nil {
			t.Fatal(err)
		}
	}
	l2, err := c.Mutex("revoked").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after the kept lease was revoked: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after %d", l2.Token(), l.Token())
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
