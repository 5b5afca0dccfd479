package etcdlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock/dlock"
)

// TestCancelledLocksLeaveNoGhost: eight clients contend for a name, and
// every few milliseconds all their Locks are cancelled at once, wherever
// they are — queued, or with the request that queues them in flight. A
// request cancelled in flight may still reach the server after the client
// gave up; its queue entry must not outlive the attempt. After each round,
// with nobody locking, the lock must be free and nobody queued, and a
// TryLock must get it.
func TestCancelledLocksLeaveNoGhost(t *testing.T) {
	srv := startServer(t)
	var cs []*dlock.Client
	for range 8 {
		cs = append(cs, newLocker(t, srv.Endpoints(), dlock.WithTTL(8*time.Second)))
	}
	for round := range 40 {
		name := fmt.Sprintf("ghost/%d", round%4)
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5+round%7*40)*time.Millisecond)
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Go(func() {
				for ctx.Err() == nil {
					l, err := c.Mutex(name).Lock(ctx)
					if err != nil {
						continue
					}
					_ = l.Unlock(context.Background())
				}
			})
		}
		wg.Wait()
		cancel()
		check := testContext(t)
		info, err := cs[0].Inspect(check, name)
		if err != nil {
			t.Fatal(err)
		}
		if info.Held || len(info.Waiters) > 0 {
			t.Fatalf("round %d: after every Lock returned, %q is held=%v with %d waiters: a cancelled Lock left its entry behind", round, name, info.Held, len(info.Waiters))
		}
		l, err := cs[round%8].Mutex(name).TryLock(check)
		if err != nil {
			t.Fatalf("round %d: TryLock of a lock nobody holds: %v", round, err)
		}
		_ = l.Unlock(check)
	}
}
