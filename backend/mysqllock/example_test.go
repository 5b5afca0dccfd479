package mysqllock_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/mysqllock"
)

// Open a client by URL; the lease table is created on first use.
func Example_open() {
	ctx := context.Background()
	c, err := dlock.Open(ctx, "mysql://app:secret@db.example:3306/app?table=locks")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	err = c.Do(ctx, "orders/42", func(ctx context.Context, l *dlock.Lease) error {
		// Send l.Token() with every write to the protected resource.
		return nil
	})
	if err != nil {
		log.Print(err)
	}
}

// Use a pool the application already has, and create the table at
// deployment time rather than on first use.
func ExampleNew() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app:secret@tcp(db.example:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	d, err := mysqllock.New(db, mysqllock.WithTable("locks"))
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	c := dlock.New(d)
	defer c.Close()
	l, err := c.Mutex("orders/42").TryLock(ctx)
	if err != nil {
		log.Fatal(err) // errors.Is(err, dlock.ErrNotAcquired) when someone holds it
	}
	defer l.Unlock(ctx)
}
