package etcdlock_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/etcdlock"
	"github.com/dlock/dlock/internal/testenv"
)

// TestHeldLocksAreWatchedWithoutAGoroutineEach: a client's held locks are
// watched for a Break on one stream of its own, read by one goroutine, not
// by a watch (and goroutines) per lock. Holding 500 locks costs no more
// goroutines than holding one; a key deleted by a plain etcd client is
// reported as that grant's loss, and only that one's; and the locks
// released by their holder are not reported lost, nor watched any more.
func TestHeldLocksAreWatchedWithoutAGoroutineEach(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	const (
		n      = 500
		broken = 123
		ttl    = 3 * time.Minute // no renewal during the test
	)
	d, err := etcdlock.New(newClient(t, srv.Endpoints()))
	if err != nil {
		t.Fatal(err)
	}
	c := dlock.New(d, dlock.WithTTL(ttl))
	t.Cleanup(func() { _ = c.Close() })
	held := make([]*dlock.Lease, n)
	lock := func(i int) {
		l, err := c.Mutex(fmt.Sprintf("many-%d", i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held[i] = l
	}
	lock(0)
	one := testenv.SettledGoroutines()
	for i := 1; i < n; i++ {
		lock(i)
	}
	if all := testenv.SettledGoroutines(); all-one >= 10 {
		t.Fatalf("holding %d locks takes %d goroutines more than holding one", n, all-one)
	}

	raw := newClient(t, srv.Endpoints())
	resp, err := raw.Delete(ctx, fmt.Sprintf("%smany-%d/", etcdlock.DefaultPrefix, broken), clientv3.WithPrefix())
	if err != nil || resp.Deleted != 1 {
		t.Fatalf("deleting the key of many-%d: %v, %d deleted", broken, err, resp.Deleted)
	}
	select {
	case <-held[broken].Done():
		if !errors.Is(held[broken].Err(), dlock.ErrLeaseLost) {
			t.Fatalf("Err after the key's deletion = %v, want ErrLeaseLost", held[broken].Err())
		}
	case <-time.After(30 * time.Second): // long before the first renewal
		t.Fatal("the deletion of a held key was not reported")
	}
	for i, l := range held {
		if i != broken && l.Err() != nil {
			t.Errorf("many-%d, whose key was not deleted, ended: %v", i, l.Err())
		}
	}
	for i, l := range held {
		if i == broken {
			continue
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock many-%d: %v", i, err)
		}
		if !errors.Is(l.Err(), dlock.ErrNotHeld) {
			t.Errorf("many-%d after Unlock: Err = %v, want ErrNotHeld", i, l.Err())
		}
	}
	if w := etcdlock.WatchedKeys(d); w != 0 {
		t.Errorf("%d keys still watched after every lock was released or lost", w)
	}
}

// TestDeletionWhileTheWatchIsDownIsReported: a held key deleted while the
// client's connection is down, and compacted away before it comes back,
// is still reported lost: the watch, created again on the new connection
// from the revision after the key's creation, is refused as compacted,
// and the key is read instead.
func TestDeletionWhileTheWatchIsDownIsReported(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	const ttl = 3 * time.Minute // no renewal during the test
	proxy := testenv.NewProxy(t, srv.Endpoints()[0])
	c := newLocker(t, []string{proxy.Addr()}, dlock.WithTTL(ttl))
	gone, err := c.Mutex("gone").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := c.Mutex("kept").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	testenv.SettledGoroutines() // the watches have begun

	proxy.Refuse()
	raw := newClient(t, srv.Endpoints())
	del, err := raw.Delete(ctx, etcdlock.DefaultPrefix+"gone/", clientv3.WithPrefix())
	if err != nil || del.Deleted != 1 {
		t.Fatalf("deleting the key of gone: %v, %d deleted", err, del.Deleted)
	}
	put, err := raw.Put(ctx, "unrelated", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Compact(ctx, put.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if err := proxy.Admit(); err != nil {
		t.Fatal(err)
	}

	select {
	case <-gone.Done():
		if !errors.Is(gone.Err(), dlock.ErrLeaseLost) {
			t.Fatalf("Err after the key's deletion = %v, want ErrLeaseLost", gone.Err())
		}
	case <-time.After(30 * time.Second): // long before the first renewal
		t.Fatal("a deletion while the connection was down was not reported")
	}
	if kept.Err() != nil {
		t.Fatalf("the lock whose key is still there ended: %v", kept.Err())
	}
	if err := kept.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
