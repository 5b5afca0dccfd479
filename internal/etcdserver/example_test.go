package etcdserver_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/dlock/dlock"
	_ "github.com/dlock/dlock/backend/etcdlock"
	"github.com/dlock/dlock/internal/etcdserver"
)

// An etcd server inside the program, and a lock taken on it through its URL.
func ExampleStart() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "etcd")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	srv, err := etcdserver.Start(ctx, etcdserver.Config{Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	c, err := dlock.Open(ctx, srv.URL())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	err = c.Do(ctx, "orders/42", func(ctx context.Context, l *dlock.Lease) error {
		fmt.Println("holding orders/42 with a fencing token:", l.Token() > 0)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: holding orders/42 with a fencing token: true
}
