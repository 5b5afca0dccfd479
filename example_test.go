package dlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/dlock/dlock"
	_ "github.com/dlock/dlock/backend/memlock" // registers mem://; use etcd://, redis://, … in production
)

// The basic use: take the lock, do the work with the fencing token, release.
func ExampleMutex_Lock() {
	ctx := context.Background()
	c, err := dlock.Open(ctx, "mem://example")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	m := c.Mutex("orders/42", dlock.WithTTL(10*time.Second))
	lease, err := m.Lock(ctx) // blocks until granted or ctx ends
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)

	select {
	case <-lease.Done(): // closed if the lease is lost
		log.Fatal(lease.Err())
	default:
		fmt.Println("holding orders/42 with token", lease.Token())
	}
	// Output: holding orders/42 with token 1
}

// Do is the "with lock:" of Go: acquire, run, always release; the callback's
// context is cancelled if the lease is lost.
func ExampleClient_Do() {
	ctx := context.Background()
	c, err := dlock.Open(ctx, "mem://example-do")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	stock := 1
	for range 3 {
		err := c.Do(ctx, "seckill/item-1", func(ctx context.Context, l *dlock.Lease) error {
			if stock == 0 {
				return fmt.Errorf("sold out (token %d)", l.Token())
			}
			stock--
			fmt.Println("sold with token", l.Token())
			return nil
		})
		if err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// sold with token 1
	// sold out (token 2)
	// sold out (token 3)
}

// TryLock does not wait: ErrNotAcquired tells that someone else holds it.
func ExampleMutex_TryLock() {
	ctx := context.Background()
	c, _ := dlock.Open(ctx, "mem://example-try")
	defer c.Close()

	first, _ := c.Mutex("report").TryLock(ctx)
	_, err := c.Mutex("report").TryLock(ctx)
	fmt.Println(err)
	first.Unlock(ctx)
	// Output: dlock: lock is held by another owner
}

// A semaphore caps concurrent work across the fleet: here at most two
// renders at once. Each permit is a lease with its own fencing token.
func ExampleClient_Semaphore() {
	ctx := context.Background()
	c, _ := dlock.Open(ctx, "mem://example-sem")
	defer c.Close()

	sem := c.Semaphore("reports/render", 2)
	a, _ := sem.Acquire(ctx)
	b, _ := sem.Acquire(ctx)
	_, err := sem.TryAcquire(ctx) // both permits are held
	fmt.Println(a.Token(), b.Token(), err)
	a.Unlock(ctx)
	third, _ := sem.TryAcquire(ctx)
	fmt.Println("third permit, token", third.Token())
	b.Unlock(ctx)
	third.Unlock(ctx)
	// Output:
	// 1 2 dlock: lock is held by another owner
	// third permit, token 3
}

// DoLimited runs fn under one of n permits, as Do does under a mutex.
func ExampleClient_DoLimited() {
	ctx := context.Background()
	c, _ := dlock.Open(ctx, "mem://example-dolimited")
	defer c.Close()

	err := c.DoLimited(ctx, "reports/render", 3, func(ctx context.Context, l *dlock.Lease) error {
		fmt.Println("rendering under permit token", l.Token())
		return nil
	})
	fmt.Println(err)
	// Output:
	// rendering under permit token 1
	// <nil>
}

// A read-write lock: readers hold together, a writer alone; a reader that
// comes while a writer waits queues behind it.
func ExampleClient_RWMutex() {
	ctx := context.Background()
	c, _ := dlock.Open(ctx, "mem://example-rw")
	defer c.Close()

	rw := c.RWMutex("catalog")
	r1, _ := rw.RLock(ctx)
	r2, _ := rw.RLock(ctx) // readers share
	_, err := rw.TryLock(ctx)
	fmt.Println("writer while read:", err)
	r1.Unlock(ctx)
	r2.Unlock(ctx)
	w, _ := rw.Lock(ctx)
	fmt.Println("writer's token above the readers':", w.Token() > r2.Token())
	w.Unlock(ctx)
	// Output:
	// writer while read: dlock: lock is held by another owner
	// writer's token above the readers': true
}

// Leader election: Campaign blocks until this client leads; the lease's
// token is the term, which a resource can use to refuse a deposed leader.
func ExampleElection_Campaign() {
	ctx := context.Background()
	c, _ := dlock.Open(ctx, "mem://example-election")
	defer c.Close()

	e := c.Election("scheduler")
	lead, err := e.Campaign(ctx, "host-a:8080")
	if err != nil {
		log.Fatal(err)
	}
	who, _ := e.Leader(ctx)
	fmt.Println(who.Value, "leads in term", who.Term)
	e.Resign(ctx, lead)
	_, err = e.Leader(ctx)
	fmt.Println(err)
	// Output:
	// host-a:8080 leads in term 1
	// dlock: lock not held
}
