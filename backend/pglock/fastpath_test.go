package pglock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/pglock"
	"github.com/dlock/dlock/internal/testenv"
)

// statementCounter counts the statements a pool sends: each query, and
// each statement of a batch.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}

func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TestUncontendedLockIsOneStatementAndUnlockOne: the package doc's "a
// lock that is free and that nobody waits for is taken in one statement,
// and released in one". Lock and TryLock of a free lock, plain and fair,
// then Unlock, send two statements between them on the driver's pool.
func TestUncontendedLockIsOneStatementAndUnlockOne(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 60*time.Second)
	cfg, err := pgxpool.ParseConfig(srv.URL(srv.Addr, ""))
	if err != nil {
		t.Fatal(err)
	}
	count := &statementCounter{}
	cfg.ConnConfig.Tracer = count
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d, err := pglock.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	c := dlock.New(d, dlock.WithTTL(time.Minute))
	for _, fair := range []bool{false, true} {
		for _, try := range []bool{false, true} {
			t.Run(fmt.Sprintf("fair=%v/try=%v", fair, try), func(t *testing.T) {
				var opts []dlock.Option
				if fair {
					opts = append(opts, dlock.WithFair())
				}
				m := c.Mutex(fmt.Sprintf("uncontended/%v/%v", fair, try), opts...)
				lockUnlock := func() {
					t.Helper()
					lock := m.Lock
					if try {
						lock = m.TryLock
					}
					l, err := lock(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if err := l.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				}
				lockUnlock() // the tables, and the name's row
				const n = 10
				before := count.n.Load()
				for range n {
					lockUnlock()
				}
				if got := count.n.Load() - before; got > 2*n {
					t.Errorf("%d lock+unlock sent %d statements, want at most %d", n, got, 2*n)
				}
			})
		}
	}
}

// TestReleaseRingsOnlyTheNextWaitersBell: the package doc's "a release
// tells the waiter it hands the lock to, and no one else". Four
// waiters, each a client with a LISTEN connection of its own, queue one
// after another; each release hands the lock to the next, in arrival
// order, and the only notification each client's LISTEN connection
// receives is its own hand-off.
func TestReleaseRingsOnlyTheNextWaitersBell(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			var opts []dlock.Option
			if fair {
				opts = append(opts, dlock.WithFair())
			}
			ctx := testenv.Context(t, 60*time.Second)
			name := fmt.Sprintf("bell/%v", fair)
			holder := newClient(t, srv.URL(srv.Addr, ""))
			l, err := holder.Mutex(name, opts...).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			const waiters = 4
			drivers := make([]*pglock.Driver, waiters)
			granted := make(chan int, waiters)
			leases := make([]chan *dlock.Lease, waiters)
			for i := range drivers {
				// A long waiter TTL: no waiter's heartbeat looks again
				// while the test runs; only the bell wakes it.
				drivers[i] = newDriver(t, srv.URL(srv.Addr, ""), pglock.WithWaiterTTL(3*time.Minute))
				leases[i] = make(chan *dlock.Lease, 1)
				c := dlock.New(drivers[i], dlock.WithTTL(time.Minute))
				go func() {
					lw, err := c.Mutex(name, opts...).Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					granted <- i
					leases[i] <- lw
				}()
				waitersShown(t, holder, name, i+1)
			}
			heard := func() []int64 {
				h := make([]int64, waiters)
				for i, d := range drivers {
					h[i] = pglock.Heard(d)
				}
				return h
			}
			start := heard()
			last := l
			for want := range waiters {
				if err := last.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				var got int
				select {
				case got = <-granted:
				case <-time.After(30 * time.Second):
					t.Fatalf("no waiter was granted the lock after release %d (heard %v since they queued)", want, sub(heard(), start))
				}
				if fair && got != want {
					t.Errorf("release %d granted waiter %d, want %d (arrival order)", want, got, want)
				}
				next := <-leases[got]
				if next.Token() <= last.Token() {
					t.Errorf("token %d after %d", next.Token(), last.Token())
				}
				last = next
			}
			// (The last release hands the lock to nobody: it frees it and
			// wakes, on the table's channel, whoever waits without the
			// queue. Not counted.)
			for i, n := range sub(heard(), start) {
				if n != 1 {
					t.Errorf("waiter %d's LISTEN connection received %d notifications, want 1 (its hand-off)", i, n)
				}
			}
			if err := last.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func sub(a, b []int64) []int64 {
	d := make([]int64, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	return d
}
