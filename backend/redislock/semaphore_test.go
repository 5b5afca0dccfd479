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

// semWakeBound bounds a wake-up in the tests below, whose fallbacks (the
// waiters' heartbeat, a third of a 3-minute waiter TTL, and the holders'
// 2-minute TTL) are a minute or more away: a waiter granted within it was
// woken by a message. (It bounds a wake-up, not a speed: a wake-up takes
// milliseconds.)
const semWakeBound = 20 * time.Second

// semClient is a client with its own driver and connections, whose
// waiters would poll only once a minute.
func semClient(t *testing.T, srv *testenv.Redis, fair bool) *dlock.Client {
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	opts := []dlock.Option{dlock.WithTTL(2 * time.Minute)}
	if fair {
		opts = append(opts, dlock.WithFair())
	}
	c := dlock.New(newDriver(t, rdb, redislock.WithWaiterTTL(3*time.Minute)), opts...)
	t.Cleanup(func() { c.Close(); rdb.Close() })
	return c
}

// A release of a permit wakes the first waiter by a message on the name's
// channel; a grant that leaves a permit free wakes the next, so that
// Break, which frees every permit at once, lets every waiter in that fits.
// Fair waiters are granted in arrival order.
func TestSemaphoreReleaseWakesWaiters(t *testing.T) {
	srv := testenv.StartRedis(t)
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			const n = 2
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			name := "sem-wake/" + t.Name()
			holder := semClient(t, srv, fair)
			var held []*dlock.Lease
			for range n {
				l, err := holder.Semaphore(name, n).Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, l)
			}
			type grant struct {
				i   int
				l   *dlock.Lease
				err error
			}
			granted := make(chan grant, 3)
			for i := range 3 {
				c := semClient(t, srv, fair)
				go func() { // reports to next only: it may outlive a failed test
					l, err := c.Semaphore(name, n).Acquire(ctx)
					granted <- grant{i, l, err}
				}()
				// One at a time, so that the arrival order is known.
				for {
					in, err := holder.Inspect(ctx, name)
					if err != nil {
						t.Fatal(err)
					}
					if len(in.Waiters) == i+1 {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			next := func(what string) grant {
				t.Helper()
				select {
				case g := <-granted:
					if g.err != nil {
						t.Fatalf("%s: waiter %d: %v", what, g.i, g.err)
					}
					return g
				case <-time.After(semWakeBound):
					t.Fatalf("%s: no waiter woken within %v", what, semWakeBound)
				}
				return grant{}
			}
			if err := held[0].Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			first := next("after a release")
			if err := holder.Break(ctx, name); err != nil {
				t.Fatal(err)
			}
			second, third := next("after Break"), next("after the grant that followed Break")
			// Break frees both permits, and the two waiters left are
			// granted one right after the other: their reports may reach
			// the channel in either order, so they are put in grant order,
			// which their tokens give.
			if third.l.Token() < second.l.Token() {
				second, third = third, second
			}
			if fair && (first.i != 0 || second.i != 1 || third.i != 2) {
				t.Errorf("fair waiters granted in the order %d, %d, %d; want their arrival order 0, 1, 2", first.i, second.i, third.i)
			}
			if !(first.l.Token() > held[1].Token() && second.l.Token() > first.l.Token() && third.l.Token() > second.l.Token()) {
				t.Errorf("tokens %d, %d (held), then %d, %d, %d: want them increasing in grant order",
					held[0].Token(), held[1].Token(), first.l.Token(), second.l.Token(), third.l.Token())
			}
			for _, l := range []*dlock.Lease{second.l, third.l} {
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// An expired permit publishes nothing: a waiter looks again when the first
// permit held would expire, and is granted then. The expired holder's
// Extend and Release fail with ErrLeaseLost, and once the last permit has
// gone the semaphore's keys are gone too.
func TestExpiredPermitLetsWaiterIn(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t, time.Minute)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	d := newDriver(t, rdb)
	t.Cleanup(func() { d.Close() })
	const name, ttl = "sem-expiry", 300 * time.Millisecond
	var held []driver.Held
	for range 2 {
		req := driver.Request{Name: name, Owner: driver.NewNonce(), TTL: ttl, Limit: 2, Holder: []byte(`{"limit":2}`)}
		g, err := d.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, driver.Held{Name: name, Owner: req.Owner, Token: g.Token, Handle: g.Handle})
	}
	start := time.Now()
	l, err := semClient(t, srv, false).Semaphore(name, 2).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > semWakeBound {
		t.Errorf("granted %v after the permits' TTL of %v: the waiter did not look at their expiry", waited, ttl)
	}
	if l.Token() <= held[1].Token {
		t.Errorf("token %d after the expired permits' %d", l.Token(), held[1].Token)
	}
	if err := d.Extend(ctx, held[0], ttl); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Extend of an expired permit: %v, want ErrLeaseLost", err)
	}
	if err := d.Release(ctx, held[1]); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Release of an expired permit: %v, want ErrLeaseLost", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	k := redisscript.KeysFor(redisscript.DefaultPrefix, name)
	if n, err := rdb.Exists(ctx, k.Permits, k.Holders).Result(); err != nil || n != 0 {
		t.Errorf("EXISTS permits holders after the last permit went = %d, %v; want 0", n, err)
	}
}
