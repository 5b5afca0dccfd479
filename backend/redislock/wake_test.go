package redislock_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/redislock"
	"github.com/dlock/dlock/internal/testenv"
)

// A release looks at the queue only when the lock value carries the mark
// that a waiter queued behind it. Every way a lock can come to be held
// with waiters behind it must leave that mark, or the waiters would hear
// of the release only from their fallbacks: a heartbeat every third of the
// waiter TTL, or the holder's expiry. Here both are a minute or more away,
// so a waiter granted within wakeBound was woken by the release itself.
// (wakeBound bounds a wake-up, not a speed: a wake-up takes milliseconds.)
func TestEveryReleaseWakesTheQueue(t *testing.T) {
	srv := testenv.StartRedis(t)
	const wakeBound = 20 * time.Second
	for _, handoff := range []bool{true, false} {
		t.Run(fmt.Sprintf("handoff=%v", handoff), func(t *testing.T) {
			client := func(fair bool) *dlock.Client {
				rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
				opts := []redislock.Option{redislock.WithWaiterTTL(3 * time.Minute)}
				if !handoff {
					opts = append(opts, redislock.WithoutHandoff())
				}
				var copts []dlock.Option
				copts = append(copts, dlock.WithTTL(2*time.Minute))
				if fair {
					copts = append(copts, dlock.WithFair())
				}
				c := dlock.New(newDriver(t, rdb, opts...), copts...)
				t.Cleanup(func() { c.Close(); rdb.Close() })
				return c
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// A name with the value's separators in it: a grant from the
			// queue writes it into the new value, read from the old one.
			name := "wake/ a+b 7 {c} " + t.Name()
			plain, fair := client(false), client(true)
			granted := make(chan *dlock.Lease, 3)
			wait := func(c *dlock.Client) {
				go func() {
					l, err := c.Mutex(name).Lock(ctx)
					if err != nil {
						t.Error(err)
						l = nil
					}
					granted <- l
				}()
			}
			queued := func(n int) {
				t.Helper()
				for {
					in, err := plain.Inspect(ctx, name)
					if err != nil {
						t.Fatal(err)
					}
					if len(in.Waiters) == n {
						return
					}
					select {
					case <-ctx.Done():
						t.Fatalf("%d waiters never queued: %v", n, ctx.Err())
					case <-time.After(10 * time.Millisecond):
					}
				}
			}
			next := func(what string) *dlock.Lease {
				t.Helper()
				select {
				case l := <-granted:
					if l == nil {
						t.FailNow()
					}
					return l
				case <-time.After(wakeBound):
					t.Fatalf("%s: the waiter was not woken by the release", what)
				}
				return nil
			}
			// holds checks what Inspect and List read from the lock value
			// that a grant from the queue wrote.
			holds := func(l *dlock.Lease) {
				t.Helper()
				in, err := plain.Inspect(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				if !in.Held || in.Token != l.Token() || in.Holder.PID != os.Getpid() {
					t.Fatalf("Inspect after a grant from the queue = %+v, want held with token %d by this process", in, l.Token())
				}
				all, err := plain.List(ctx, "wake/")
				if err != nil {
					t.Fatal(err)
				}
				if !slices.ContainsFunc(all, func(in dlock.Info) bool { return in.Name == name && in.Token == l.Token() }) {
					t.Fatalf("List(\"wake/\") = %+v: %q with token %d missing", all, name, l.Token())
				}
			}

			// A lock taken while free and nobody queued carries no mark; a
			// waiter that queues behind it sets one.
			first, err := plain.Mutex(name).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wait(fair)
			queued(1)
			wait(plain)
			queued(2)
			if err := first.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			// The grant to the first waiter (a hand-off, or the woken
			// waiter's own attempt) is marked: the second waits behind it.
			second := next("first waiter after an unmarked holder")
			holds(second)
			if err := second.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			third := next("second waiter after a grant from the queue")
			holds(third)
			// The queue is empty now; a waiter that comes later marks the
			// lock again.
			wait(fair)
			queued(1)
			if err := third.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := next("a later waiter").Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
