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

// A waiter whose heartbeat has stopped for longer than the waiter TTL
// while its connection stays open (here: a proxy that holds its traffic
// back) still receives on its process channel, so PUBLISH cannot tell it
// from a live one; its entry has expired, though, and a release skips it:
// the next waiter is handed the lock, with the next token, rather than
// waiting out the lease handed to the stalled one.
func TestStalledWaiterPastWaiterTTLIsSkipped(t *testing.T) {
	srv := testenv.StartRedis(t)
	proxy := testenv.NewProxy(t, srv.Addr)
	const wttl = 300 * time.Millisecond
	// The lease TTL is far longer than the test's context: a lease handed
	// to the stalled waiter would hold the next waiter up past it.
	c := open(t, fmt.Sprintf("redis://%s?waiter_ttl=%s", srv.Addr, wttl), dlock.WithTTL(time.Minute))
	stalled := open(t, fmt.Sprintf("redis://%s?waiter_ttl=%s", proxy.Addr(), wttl), dlock.WithTTL(time.Minute))
	ctx := testenv.Context(t, time.Minute)
	const name = "queue/stalled"
	holder, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	go func() {
		if l, err := stalled.Mutex(name).Lock(sctx); err == nil {
			_ = l.Unlock(context.Background())
		}
	}()
	waitWaiters(t, c, name, 1)
	got := make(chan error, 1)
	var next *dlock.Lease
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second) // < lease TTL
		defer cancel()
		var err error
		next, err = c.Mutex(name).Lock(wctx)
		got <- err
	}()
	waitWaiters(t, c, name, 2)

	proxy.Block()
	defer proxy.Unblock()
	waitWaiters(t, c, name, 1) // the stalled waiter's entry expired
	fence := fenceOf(t, srv.Addr, name)
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter behind a stalled waiter: %v", err)
	}
	defer next.Unlock(ctx)
	if next.Token() != fence+1 {
		t.Errorf("token %d, fence counter %d before the release: the lock was handed to the stalled waiter first", next.Token(), fence)
	}
}

// A waiter whose entry is live but who is no longer in the queue's list
// (a hand-off to it came to nothing, or the list expired with another
// waiter's shorter waiter TTL) is put back in the list by its next
// attempt, and a release then hands it the lock. Here its place is taken
// out of the list by hand.
func TestWaiterMissingFromTheListIsQueuedAgain(t *testing.T) {
	srv := testenv.StartRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	// A short lease: the waiter looks again when the holder's PTTL, read
	// at its attempt, runs out (the holder renews it meanwhile); the
	// waiter TTL's heartbeat is 20s.
	c := open(t, "redis://"+srv.Addr+"?waiter_ttl=1m", dlock.WithTTL(time.Second))
	ctx := testenv.Context(t, time.Minute)
	const name = "queue/missing"
	holder, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var next *dlock.Lease
	go func() {
		var err error
		next, err = c.Mutex(name).Lock(ctx)
		got <- err
	}()
	waitWaiters(t, c, name, 1)
	k := redisscript.KeysFor(redisscript.DefaultPrefix, name)
	owners, err := admin.LRange(ctx, k.Queue, 0, -1).Result()
	if err != nil || len(owners) != 1 {
		t.Fatalf("queue %v, %v; want one waiter", owners, err)
	}
	if err := admin.LRem(ctx, k.Queue, 0, owners[0]).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := admin.Exists(ctx, k.Waiters+owners[0]).Result(); err != nil || n != 1 {
		t.Fatalf("the waiter's entry: %d, %v; want it live", n, err)
	}
	waitWaiters(t, c, name, 0)
	waitWaiters(t, c, name, 1) // its next attempt put it back
	fence := fenceOf(t, srv.Addr, name)
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter put back in the queue: %v", err)
	}
	defer next.Unlock(ctx)
	if next.Token() != fence+1 {
		t.Errorf("token %d, fence counter %d before the release: want the next, a hand-off", next.Token(), fence)
	}
}

// fenceOf reads name's fence counter.
func fenceOf(t *testing.T, addr, name string) uint64 {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	k := redisscript.KeysFor(redisscript.DefaultPrefix, name)
	n, err := rdb.Get(context.Background(), k.Fence).Uint64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A hand-off takes its token from a block that it reserves from the fence
// counter (the next hand-off of the chain takes the next number, with no
// INCR): tokens still increase strictly, across a chain of hand-offs and
// the grants that take the counter's next value after it — after a
// release that finds nobody queued, and after a Break in mid-chain.
func TestTokensIncreaseAcrossHandoffChains(t *testing.T) {
	srv := testenv.StartRedis(t)
	// A short TTL: the broken holder learns of the Break at its renewal.
	c := open(t, "redis://"+srv.Addr, dlock.WithTTL(3*time.Second))
	ctx := testenv.Context(t, time.Minute)
	const name = "queue/tokens"
	var tokens []uint64
	check := func(what string, l *dlock.Lease) {
		t.Helper()
		if n := len(tokens); n > 0 && l.Token() <= tokens[n-1] {
			t.Errorf("%s: token %d after %v", what, l.Token(), tokens)
		}
		tokens = append(tokens, l.Token())
	}
	// chain: first takes the lock, then waiters queue behind it and are
	// handed the lock one after the other; the last one is returned held.
	chain := func(first *dlock.Lease, waiters int) *dlock.Lease {
		t.Helper()
		got := make(chan *dlock.Lease, waiters)
		for i := range waiters {
			go func() {
				l, err := c.Mutex(name).Lock(ctx)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			waitWaiters(t, c, name, i+1)
		}
		held := first
		for range waiters {
			if err := held.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if held = <-got; held == nil {
				t.FailNow()
			}
			check("hand-off", held)
		}
		return held
	}
	first, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check("first", first)
	last := chain(first, 3)
	if err := last.Unlock(ctx); err != nil { // nobody queued
		t.Fatal(err)
	}
	again, err := c.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check("grant after a chain", again)
	last = chain(again, 2)
	if err := c.Break(ctx, name); err != nil {
		t.Fatal(err)
	}
	<-last.Done()
	after, err := c.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check("grant after a Break in mid-chain", after)
	if err := after.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("tokens %v", tokens)
}

// TestWaiterBehindOthersTakesOverACrashedHolder: the package doc's "a new
// waiter behind others does not ask for the holder's PTTL; its heartbeat
// is when it looks should the lock still be held with the waiters ahead
// of it gone". The holder's lease is never renewed nor released (a crashed
// holder's: an Acquire through the driver, with nothing to renew it); the
// first waiter, which knows when that lease runs out, leaves the queue;
// the waiter behind it, which was never told, takes the lock after the
// lease runs out, from its heartbeat, well within its Lock's context.
func TestWaiterBehindOthersTakesOverACrashedHolder(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t, time.Minute)
	const name = "queue/crashed-holder"
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	d, err := redislock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	const ttl = time.Second
	crashed, err := d.Acquire(ctx, driver.Request{Name: name, Owner: "crashed", TTL: ttl, Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	u := "redis://" + srv.Addr + "?waiter_ttl=3s" // heartbeat 1s
	first, behind := open(t, u), open(t, u)
	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	firstDone := make(chan error, 1)
	go func() {
		l, err := first.Mutex(name).Lock(fctx)
		if err == nil {
			err = fmt.Errorf("the first waiter was granted (token %d) before it left", l.Token())
			_ = l.Unlock(context.Background())
		}
		firstDone <- err
	}()
	waitWaiters(t, behind, name, 1)
	type outcome struct {
		l   *dlock.Lease
		err error
	}
	got := make(chan outcome, 1)
	go func() {
		bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := behind.Mutex(name).Lock(bctx)
		got <- outcome{l, err}
	}()
	waitWaiters(t, behind, name, 2)
	fcancel()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("first waiter: %v, want it to leave the queue", err)
	}
	o := <-got
	if o.err != nil {
		t.Fatalf("the waiter behind, with the holder crashed and the waiter ahead gone: %v", o.err)
	}
	defer o.l.Unlock(ctx)
	if o.l.Token() <= crashed.Token {
		t.Errorf("token %d, want above the crashed holder's %d", o.l.Token(), crashed.Token)
	}
}
