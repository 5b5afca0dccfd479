package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/internal/testenv"
)

// TestRestartWithoutPersistenceFreesHeldLockAndHolderLearnsAtRenewal: the
// package doc's warning about a Redis without persistence, as stated. Its
// restart frees a held lock at once — another client is granted it — and
// the old holder, which believed it held the lock meanwhile, learns of the
// loss when its next renewal is refused: its Done closes with
// ErrLeaseLost, and its Unlock leaves the new holder's lock alone.
func TestRestartWithoutPersistenceFreesHeldLockAndHolderLearnsAtRenewal(t *testing.T) {
	srv := testenv.StartRedis(t)
	const ttl = 3 * time.Second
	holder := open(t, "redis://"+srv.Addr, dlock.WithTTL(ttl))
	other := open(t, "redis://"+srv.Addr, dlock.WithTTL(ttl))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := holder.Mutex("volatile/held").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	var l2 *dlock.Lease
	testenv.Eventually(t, 30*time.Second, "TryLock to reach the restarted server", func() error {
		l2, err = other.Mutex("volatile/held").TryLock(ctx)
		if errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock after a restart without persistence: %v; the doc says the restart frees every lock", err)
		}
		return err
	})
	select {
	case <-l.Done():
		if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
			t.Errorf("old holder's Err = %v, want ErrLeaseLost", l.Err())
		}
	case <-time.After(2*ttl + 10*time.Second):
		t.Fatal("the old holder never learnt that the restart freed its lock: its renewals must be refused")
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("old holder's Unlock = %v, want ErrLeaseLost", err)
	}
	if _, err := holder.Mutex("volatile/held").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("after the old holder's Unlock the new holder's lock must still be held; TryLock got %v", err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseWithNobodyQueuedPublishesNothing: the package doc's "a
// release that finds nobody queued publishes nothing". A client
// subscribed to every channel sees no message from a Lock and Unlock that
// nobody waited for: the first message it receives is the one it
// published itself afterwards (Redis delivers a connection's messages in
// order, so any message of the release would have come first).
func TestReleaseWithNobodyQueuedPublishesNothing(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	sub := rdb.PSubscribe(ctx, "*")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	c := open(t, "redis://"+srv.Addr)
	for range 3 {
		l, err := c.Mutex("unqueued").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.Publish(ctx, "test:sentinel", "end").Err(); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Channel != "test:sentinel" {
		t.Errorf("a release that nobody waited for published on %q (%q)", msg.Channel, msg.Payload)
	}
}
