package redislock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/internal/testenv"
)

// queueWaiter puts owner in the queue of name as fair_acquire.lua does,
// with an entry that lives until expiresMs (Unix ms) and names proc as
// the waiter's process channel: a waiter in the state a fair Lock may
// find on arrival, with the lock free — a release woke it and it has not
// taken the lock yet (expiresMs ahead), or it died in the queue
// (expiresMs past: no entry, as its key has expired).
func queueWaiter(t *testing.T, rdb *redis.Client, name, owner, proc string, expiresMs int64) {
	t.Helper()
	k := redisscript.KeysFor(redisscript.DefaultPrefix, name)
	ctx := context.Background()
	// "<ttl ms> <process channel> <len(name)> <name><holder>" (queue.lua)
	entry := "60000 " + proc + " " + strconv.Itoa(len(name)) + " " + name + "{}"
	if left := time.Until(time.UnixMilli(expiresMs)); left > 0 {
		if err := rdb.Set(ctx, k.Waiters+owner, entry, left).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.RPush(ctx, k.Queue, owner).Err(); err != nil {
		t.Fatal(err)
	}
}

// An arriving fair Lock, in a process that has not waited for the name,
// does not pass a live waiter queued before it, even when it finds the
// lock free: it queues behind it.
func TestFairLockDoesNotPassLiveWaiterOfFreeLock(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	const name = "arrival/live"
	// The waiter's process listens on its channel, as a live one does: a
	// hand-off to it is taken.
	sub := rdb.Subscribe(context.Background(), "arrival-proc")
	defer sub.Close()
	if _, err := sub.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	queueWaiter(t, rdb, name, "waiter", "arrival-proc", time.Now().Add(time.Hour).UnixMilli())
	c := open(t, "redis://"+srv.Addr, dlock.WithFair())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l, err := c.Mutex(name).Lock(ctx)
	if err == nil {
		_ = l.Unlock(context.Background())
		t.Fatal("a fair Lock was granted the lock before the live waiter queued ahead of it")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock: %v, want the context's deadline (waiting behind the live waiter)", err)
	}
}

// An arriving fair Lock that finds the lock free and only waiters that
// are gone (their entries expired) in the queue is granted the lock, and
// the gone waiters are dropped.
func TestFairLockPassesGoneWaitersOfFreeLock(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	const name = "arrival/gone"
	queueWaiter(t, rdb, name, "gone1", "-", 1)
	queueWaiter(t, rdb, name, "gone2", "-", 1)
	c := open(t, "redis://"+srv.Addr, dlock.WithFair())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock of a free lock with only gone waiters queued: %v", err)
	}
	defer l.Unlock(ctx)
	in, err := c.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Held || in.Token != l.Token() || len(in.Waiters) != 0 {
		t.Errorf("Inspect after the grant: held %v, token %d (lease's %d), waiters %v; want held, the lease's token, no waiters", in.Held, in.Token, l.Token(), in.Waiters)
	}
}
