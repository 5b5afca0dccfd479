package pglock_test

import (
	"context"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/pglock"
)

// Open a client by URL: TLS per sslmode, the lease table per table=.
func Example_open() {
	ctx := context.Background()
	c, err := dlock.Open(ctx, "postgres://app:secret@db.internal:5432/app?sslmode=verify-full&table=locks")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	err = c.Do(ctx, "orders/42", func(ctx context.Context, l *dlock.Lease) error {
		// Pass l.Token() with every write; ctx ends if the lease is lost.
		return nil
	}, dlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}

// Use the program's own pool, and create the table ahead of time (for
// example at deploy, as the schema's owner).
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	d, err := pglock.New(pool, pglock.WithTable("ops.locks"))
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	c := dlock.New(d)
	defer c.Close()
	l, err := c.Mutex("nightly-report").TryLock(ctx)
	if err != nil {
		log.Fatal(err) // dlock.ErrNotAcquired if another process runs it
	}
	defer l.Unlock(ctx)
}
