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
