package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/backend/redislock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// rwWakeBound bounds a wake-up in the tests below, as semWakeBound does:
// the waiters' fallbacks (a heartbeat every minute, holders' leases of
// two minutes) are further away, so a waiter granted within it was woken
// by a message.
const rwWakeBound = 20 * time.Second

// rwClient is a client with its own driver and connections, whose waiters
// would look again only once a minute unless woken; without handoff it
// behaves as on Redis Cluster.
func rwClient(t *testing.T, srv *testenv.Redis, handoff bool, opts ...dlock.Option) *dlock.Client {
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	ropts := []redislock.Option{redislock.WithWaiterTTL(3 * time.Minute)}
	if !handoff {
		ropts = append(ropts, redislock.WithoutHandoff())
	}
	c := dlock.New(newDriver(t, rdb, ropts...), append([]dlock.Option{dlock.WithTTL(2 * time.Minute)}, opts...)...)
	t.Cleanup(func() { c.Close(); rdb.Close() })
	return c
}

// lockAsync starts a reader's (shared) or the writer's Lock of name and
// returns where its lease will arrive; it waits until the waiter is queued,
// the n-th, so that arrival order is known.
func lockAsync(t *testing.T, ctx context.Context, c *dlock.Client, name string, shared bool, n int) <-chan *dlock.Lease {
	t.Helper()
	got := make(chan *dlock.Lease, 1)
	go func() {
		rw := c.RWMutex(name)
		lock := rw.Lock
		if shared {
			lock = rw.RLock
		}
		l, err := lock(ctx)
		if err != nil && ctx.Err() == nil {
			t.Errorf("shared=%v: %v", shared, err)
		}
		got <- l
	}()
	waitWaiters(t, c, name, n)
	return got
}

// granted returns the lease from ch, failing t if none comes within
// rwWakeBound.
func granted(t *testing.T, what string, ch <-chan *dlock.Lease) *dlock.Lease {
	t.Helper()
	select {
	case l := <-ch:
		if l == nil {
			t.Fatalf("%s: not granted", what)
		}
		return l
	case <-time.After(rwWakeBound):
		t.Fatalf("%s: not woken within %v", what, rwWakeBound)
	}
	return nil
}

// notGranted checks that ch has no lease after a short look.
func notGranted(t *testing.T, what string, ch <-chan *dlock.Lease) {
	t.Helper()
	select {
	case l := <-ch:
		t.Fatalf("%s was granted (token %d)", what, l.Token())
	case <-time.After(200 * time.Millisecond):
	}
}

func unlock(t *testing.T, ctx context.Context, ls ...*dlock.Lease) {
	t.Helper()
	for _, l := range ls {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A writer's release wakes the readers queued behind it, all of them up
// to the next writer: the first by the release (never handed the lock,
// which is a writer's), the others each by the grant before it. A writer
// that waits behind those readers is not passed by a reader that comes
// later, is still waiting after the first reader's release, and is woken
// by the last one's. Its release wakes the reader behind it. Tokens
// follow grant order across readers and writers.
func TestRWReleasesWakeReadersAndWriters(t *testing.T) {
	srv := testenv.StartRedis(t)
	for _, handoff := range []bool{true, false} {
		t.Run(fmt.Sprintf("handoff=%v", handoff), func(t *testing.T) {
			ctx := testenv.Context(t, 2*time.Minute)
			name := "rw-wake/" + t.Name()
			c := func() *dlock.Client { return rwClient(t, srv, handoff) }
			w1, err := c().RWMutex(name).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			r1ch := lockAsync(t, ctx, c(), name, true, 1)
			r2ch := lockAsync(t, ctx, c(), name, true, 2)
			unlock(t, ctx, w1)
			r1, r2 := granted(t, "first reader after the writer's release", r1ch), granted(t, "second reader after the first's grant", r2ch)
			all, err := c().List(ctx, "rw-wake/")
			if err != nil {
				t.Fatal(err)
			}
			if len(all) != 1 || all[0].Name != name || len(all[0].Permits) != 2 || all[0].Permits[1].Token != r2.Token() {
				t.Fatalf("List = %+v; want %q held by its two readers", all, name)
			}

			w2ch := lockAsync(t, ctx, c(), name, false, 1)
			late := c()
			if l, err := late.RWMutex(name).TryRLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("TryRLock while a writer waits behind readers: %v (lease %v), want ErrNotAcquired", err, l)
			}
			r3ch := lockAsync(t, ctx, late, name, true, 2)
			unlock(t, ctx, r1)
			notGranted(t, "the writer, with a reader still holding,", w2ch)
			unlock(t, ctx, r2)
			w2 := granted(t, "the writer after the last reader's release", w2ch)
			notGranted(t, "the reader behind the writer, while it holds,", r3ch)
			unlock(t, ctx, w2)
			r3 := granted(t, "the reader after the second writer's release", r3ch)
			unlock(t, ctx, r3)

			if !(w1.Token() < r1.Token() && r1.Token() < r2.Token() && r2.Token() < w2.Token() && w2.Token() < r3.Token()) {
				t.Errorf("tokens writer %d, readers %d %d, writer %d, reader %d: want them increasing in grant order",
					w1.Token(), r1.Token(), r2.Token(), w2.Token(), r3.Token())
			}
		})
	}
}

// A reader whose lease ran out without a release (its process died)
// publishes nothing, and its permit is still in the sorted set, but the
// readers' mark in the lock key lasts only as long as the latest reader's
// lease — no longer once a reader with a longer lease has released — so a
// waiting writer reads the mark's PTTL, looks again then, and is granted,
// with a higher token. The expired reader can neither renew nor release.
func TestRWExpiredReaderDoesNotBlockWriter(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t, time.Minute)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	d := newDriver(t, rdb)
	t.Cleanup(func() { d.Close() })
	const name, ttl = "rw-expiry", 300 * time.Millisecond
	rlock := func(ttl time.Duration) driver.Held {
		t.Helper()
		req := driver.Request{Name: name, Owner: driver.NewNonce(), TTL: ttl, Fair: true, Shared: true, Holder: []byte(`{"shared":true}`)}
		g, err := d.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return driver.Held{Name: name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}
	}
	dead, released := rlock(ttl), rlock(time.Minute)
	if err := d.Release(ctx, released); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w, err := rwClient(t, srv, true).RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > rwWakeBound {
		t.Errorf("the writer was granted %v after a reader's TTL of %v: it did not look at the mark's expiry, or the mark outlived the readers", waited, ttl)
	}
	if w.Token() <= released.Token {
		t.Errorf("writer's token %d after the readers' %d", w.Token(), released.Token)
	}
	if err := d.Extend(ctx, dead, ttl); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Extend of an expired reader: %v, want ErrLeaseLost", err)
	}
	if err := d.Release(ctx, dead); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Release of an expired reader: %v, want ErrLeaseLost", err)
	}
	unlock(t, ctx, w)
}

// A reader that renews its lease keeps the mark alive with it: after
// several of its TTLs, a writer still finds the lock held, and the
// reader's lease is still valid.
func TestRWRenewedReaderKeepsWriterOut(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t, time.Minute)
	const name, ttl = "rw-renewed", 300 * time.Millisecond
	c := rwClient(t, srv, true, dlock.WithTTL(ttl))
	r, err := c.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * ttl)
	if l, err := c.RWMutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock while a renewed reader holds: %v (lease %v), want ErrNotAcquired", err, l)
	}
	select {
	case <-r.Done():
		t.Fatalf("the reader's lease was lost: %v", r.Err())
	default:
	}
	unlock(t, ctx, r)
}

// A reader's lease is valid only while the readers' mark is in the lock
// key: once the mark is gone (here deleted, as eviction or a failover
// would lose it) and a writer has taken the lock key, the reader, whose
// permit has not expired, can neither renew nor release it, and Inspect
// shows the writer alone.
func TestRWReaderLosesItsLeaseWithTheMark(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t, time.Minute)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	d := newDriver(t, rdb)
	t.Cleanup(func() { d.Close() })
	const name = "rw-mark"
	req := driver.Request{Name: name, Owner: driver.NewNonce(), TTL: time.Minute, Fair: true, Shared: true, Holder: []byte(`{"shared":true}`)}
	g, err := d.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	reader := driver.Held{Name: name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}
	if err := rdb.Del(ctx, redisscript.KeysFor(redisscript.DefaultPrefix, name).Lock).Err(); err != nil {
		t.Fatal(err)
	}
	c := rwClient(t, srv, true)
	w, err := c.RWMutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock once the mark is gone: %v", err)
	}
	if err := d.Extend(ctx, reader, time.Minute); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Extend of a reader whose mark is gone: %v, want ErrLeaseLost", err)
	}
	if err := d.Release(ctx, reader); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Release of a reader whose mark is gone: %v, want ErrLeaseLost", err)
	}
	in, err := c.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Held || in.Token != w.Token() || len(in.Permits) != 0 {
		t.Errorf("Inspect = %+v; want held by the writer (token %d) alone", in, w.Token())
	}
	unlock(t, ctx, w)
}

// A writer that gives up while readers hold and another reader waits
// behind it wakes that reader, which joins the readers: no release would
// come to do it.
func TestRWCancelledWriterWakesTheReaderBehindIt(t *testing.T) {
	srv := testenv.StartRedis(t)
	for _, handoff := range []bool{true, false} {
		t.Run(fmt.Sprintf("handoff=%v", handoff), func(t *testing.T) {
			ctx := testenv.Context(t, 2*time.Minute)
			name := "rw-cancel/" + t.Name()
			r1, err := rwClient(t, srv, handoff).RWMutex(name).RLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			wch := lockAsync(t, wctx, rwClient(t, srv, handoff), name, false, 1)
			r2ch := lockAsync(t, ctx, rwClient(t, srv, handoff), name, true, 2)
			cancel()
			if l := <-wch; l != nil {
				t.Fatalf("the cancelled writer was granted (token %d)", l.Token())
			}
			r2 := granted(t, "the reader behind the cancelled writer", r2ch)
			unlock(t, ctx, r1, r2)
		})
	}
}

// A cancelled reader leaves nothing in the queue: a writer that comes
// later behind the holding writer is the only waiter, and is granted at
// its release.
func TestRWCancelledReaderLeavesNothingBehind(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t, 2*time.Minute)
	const name = "rw-cancel-reader"
	c := rwClient(t, srv, true)
	w1, err := c.RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if l, err := rwClient(t, srv, true).RWMutex(name).RLock(rctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("reader behind a writer: %v (lease %v), want context.DeadlineExceeded", err, l)
	}
	waitWaiters(t, c, name, 0)
	w2ch := lockAsync(t, ctx, rwClient(t, srv, true), name, false, 1)
	unlock(t, ctx, w1)
	unlock(t, ctx, granted(t, "the writer behind the cancelled reader", w2ch))
}

// Break of a lock held by readers ends every reader's lease: a writer
// waiting is granted at once, with a higher token, and the readers' leases
// are lost (their renewals fail); with nobody waiting, the lock is free
// after Break, with no reader left in Inspect.
func TestRWBreakFreesEveryReader(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t, 2*time.Minute)
	const name = "rw-break"
	// Readers renew every second, so that their loss shows soon.
	readers := rwClient(t, srv, true, dlock.WithTTL(3*time.Second))
	admin := rwClient(t, srv, true)
	rlock := func() *dlock.Lease {
		t.Helper()
		l, err := readers.RWMutex(name).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	r1, r2 := rlock(), rlock()
	wch := lockAsync(t, ctx, rwClient(t, srv, true), name, false, 1)
	if err := admin.Break(ctx, name); err != nil {
		t.Fatal(err)
	}
	w := granted(t, "the writer after Break", wch)
	if w.Token() <= r2.Token() {
		t.Errorf("writer's token %d after the broken readers' %d", w.Token(), r2.Token())
	}
	for i, r := range []*dlock.Lease{r1, r2} {
		select {
		case <-r.Done():
		case <-time.After(rwWakeBound):
			t.Errorf("reader %d's lease not lost after Break", i+1)
		}
	}
	unlock(t, ctx, w)

	r3, r4 := rlock(), rlock()
	if err := admin.Break(ctx, name); err != nil {
		t.Fatal(err)
	}
	in, err := admin.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if in.Held || len(in.Permits) != 0 {
		t.Errorf("Inspect after Break = %+v; want free", in)
	}
	if err := admin.Break(ctx, name); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("a second Break: %v, want ErrNotHeld", err)
	}
	for i, r := range []*dlock.Lease{r3, r4} {
		select {
		case <-r.Done():
		case <-time.After(rwWakeBound):
			t.Errorf("reader %d's lease not lost after the second Break", i+3)
		}
	}
}

// A reader never barges, even when asked without Fair (the portable layer
// always sets it): readers hold and a writer waits, and a reader's
// TryRLock-like attempt that would take a free place whoever waits is
// refused all the same.
func TestRWReaderNeverPassesAWaitingWriter(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t, time.Minute)
	const name = "rw-barge"
	c := rwClient(t, srv, true)
	r, err := c.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wch := lockAsync(t, ctx, rwClient(t, srv, true), name, false, 1)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	d := newDriver(t, rdb)
	t.Cleanup(func() { d.Close() })
	req := driver.Request{Name: name, Owner: driver.NewNonce(), TTL: time.Minute, Shared: true, Holder: []byte(`{"shared":true}`)}
	if g, err := d.Acquire(ctx, req); !errors.Is(err, driver.ErrNotAcquired) {
		t.Errorf("an unfair reader's attempt while a writer waits: %v (token %d), want ErrNotAcquired", err, g.Token)
	}
	unlock(t, ctx, r)
	unlock(t, ctx, granted(t, "the writer", wch))
}

// compat=setnx has no read-write locks: the other libraries lock a key
// with one holder.
func TestSetNXHasNoReadWriteLocks(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t, 30*time.Second)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	d := newDriver(t, rdb, redislock.WithCompat("setnx"))
	t.Cleanup(func() { d.Close() })
	if d.Capabilities().RWMutex {
		t.Errorf("compat=setnx claims read-write locks")
	}
	req := driver.Request{Name: "rw-setnx", Owner: driver.NewNonce(), TTL: time.Minute, Shared: true}
	if _, err := d.Acquire(ctx, req); !errors.Is(err, driver.ErrUnsupported) {
		t.Errorf("a reader in compat=setnx: %v, want ErrUnsupported", err)
	}
}

// A release that hands the lock over, but finds a reader first in line,
// puts the reader back at the head of the queue and wakes it. A queue
// emptied by taking the reader off comes back with the waiters' TTL: if
// the reader is gone, its place and the queue still expire.
func TestRWReaderPutBackAtTheHeadKeepsTheQueueTTL(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t, time.Minute)
	const name = "rw-put-back"
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	w, err := rwClient(t, srv, true).RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A reader's waiting attempt, from a process that then dies.
	k := redisscript.KeysFor(redisscript.DefaultPrefix, name)
	granted, _, err := k.AcquirePermit(ctx, rdb, driver.NewNonce(), time.Minute, 0, true, []byte(`{"shared":true}`), false, time.Minute)
	if err != nil || granted {
		t.Fatalf("a reader's attempt while a writer holds: granted %v, %v", granted, err)
	}
	unlock(t, ctx, w)
	if n, err := rdb.LLen(ctx, k.Queue).Result(); err != nil || n != 1 {
		t.Fatalf("LLEN queue after the release = %d, %v; want the reader still queued", n, err)
	}
	if ttl, err := rdb.PTTL(ctx, k.Queue).Result(); err != nil || ttl <= 0 {
		t.Errorf("PTTL queue after the release = %v, %v; want the waiters' TTL", ttl, err)
	}
}
