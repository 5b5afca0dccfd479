package etcdlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/etcdlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/internal/testenv"
)

// TestServerRestartWithinTTLKeepsTheLock: the package doc's "Server
// restart" guarantee. etcd keeps leases in its database and gives each a
// full TTL again once a leader is elected, so a holder whose server is
// killed and started again within its TTL keeps its lock: its lease is
// renewed after the restart, nobody else is granted the lock, and Inspect
// shows the same token. The server stays down until a renewal has failed,
// so that the driver's handling of an unreachable server is part of it.
func TestServerRestartWithinTTLKeepsTheLock(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	const ttl = 15 * time.Second // outlasts a failed renewal and the restart
	// gRPC's reconnection backoff grows to seconds while the server is
	// down; kept short, the client reconnects as soon as the server is back.
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond}})}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	d, err := etcdlock.New(cli)
	if err != nil {
		t.Fatal(err)
	}
	fd := &dlocktest.FailedRenewals{Driver: d}
	holder := dlock.New(fd, dlock.WithTTL(ttl))
	t.Cleanup(func() { _ = holder.Close() })
	l, err := holder.Mutex("restart/held").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dlocktest.HolderKeepsLockAcrossOutage(t, l, fd, newLocker(t, srv.Endpoints()), srv.Kill, func() {
		if err := testenv.StartEtcdAgain(srv); err != nil {
			t.Fatal(err)
		}
	})
}

// watchCounter counts the watches open on each key under prefix, across
// the clients it is installed in, and the most ever open on one key at
// once.
type watchCounter struct {
	prefix string
	mu     sync.Mutex
	open   map[string]int
	most   int
	mostOn string
	total  int
}

// install makes cli's watches go through the counter.
func (w *watchCounter) install(cli *clientv3.Client) {
	cli.Watcher = countedWatcher{Watcher: cli.Watcher, c: w}
}

func (w *watchCounter) state() (most int, on string, total int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.most, w.mostOn, w.total
}

type countedWatcher struct {
	clientv3.Watcher
	c *watchCounter
}

func (cw countedWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	w := cw.c
	if !strings.HasPrefix(key, w.prefix) {
		return cw.Watcher.Watch(ctx, key, opts...)
	}
	w.mu.Lock()
	w.open[key]++
	w.total++
	if w.open[key] > w.most {
		w.most, w.mostOn = w.open[key], key
	}
	w.mu.Unlock()
	go func() {
		<-ctx.Done() // a watch lasts until its context ends
		w.mu.Lock()
		w.open[key]--
		w.total--
		w.mu.Unlock()
	}()
	return cw.Watcher.Watch(ctx, key, opts...)
}

// TestWaitersWatchOnlyTheKeyAhead: the package doc's "A waiter watches
// only the key directly ahead of it, so a release reaches one waiter, not
// the whole queue". Five clients queue behind a holder and are granted in
// turn; no key is ever watched by more than the one waiter behind it, so
// no release wakes the queue. (Its holder watches it too, on the driver's
// stream of held keys, which the counter does not see.)
func TestWaitersWatchOnlyTheKeyAhead(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	const waiters = 5
	wc := &watchCounter{prefix: etcdlock.DefaultPrefix + "herd/", open: map[string]int{}}
	locker := func() *dlock.Client {
		cli := newClient(t, srv.Endpoints())
		wc.install(cli)
		d, err := etcdlock.New(cli)
		if err != nil {
			t.Fatal(err)
		}
		c := dlock.New(d, dlock.WithTTL(10*time.Second))
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	holder := locker()
	l, err := holder.Mutex("herd").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, waiters)
	for i := range waiters {
		c := locker()
		go func() {
			lw, err := c.Mutex("herd").Lock(ctx)
			if err == nil {
				err = lw.Unlock(ctx)
			}
			done <- err
		}()
		waitWaiters(t, holder, "herd", i+1)
	}
	// Every waiter watches the key ahead of it.
	testenv.Eventually(t, 30*time.Second, "the waiters' watches", func() error {
		if _, _, total := wc.state(); total < waiters {
			return fmt.Errorf("%d watches open", total)
		}
		return nil
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range waiters {
		if err := <-done; err != nil {
			t.Fatalf("waiter: %v", err)
		}
	}
	if most, on, _ := wc.state(); most > 1 {
		t.Errorf("%d watches were open at once on %q: more than the waiter behind it", most, on)
	}
}

// TestWaiterKeepsItsPlaceLongerThanItsTTL: the package doc's "A waiter
// keeps its lease alive while it waits". Two waiters queue, in order,
// behind a holder that keeps the lock for three of their TTLs; their queue
// entries outlive their TTL, so the first to arrive is granted first, and
// both are granted.
func TestWaiterKeepsItsPlaceLongerThanItsTTL(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	const ttl = 2 * time.Second // etcd's shortest lease
	holder := newLocker(t, srv.Endpoints(), dlock.WithTTL(ttl))
	l, err := holder.Mutex("long-wait").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 2)
	errs := make(chan error, 2)
	for i, who := range []string{"first", "second"} {
		c := newLocker(t, srv.Endpoints(), dlock.WithTTL(ttl))
		go func() {
			lw, err := c.Mutex("long-wait").Lock(ctx)
			if err == nil {
				order <- who
				err = lw.Unlock(ctx)
			}
			errs <- err
		}()
		waitWaiters(t, holder, "long-wait", i+1)
	}
	time.Sleep(3 * ttl) // the waiters wait longer than their TTL
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("waiter: %v", err)
		}
	}
	if a, b := <-order, <-order; a != "first" || b != "second" {
		t.Errorf("granted to %s, then %s: a waiter lost its place while it waited", a, b)
	}
}
