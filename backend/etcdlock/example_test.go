package etcdlock_test

import (
	"context"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/etcdlock"
)

// A dlock client over an etcd client the program already has.
func ExampleNew() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	d, err := etcdlock.New(cli, etcdlock.WithPrefix("myapp/locks/"))
	if err != nil {
		log.Fatal(err)
	}
	c := dlock.New(d)
	defer c.Close()

	ctx := context.Background()
	err = c.Do(ctx, "orders/42", func(ctx context.Context, l *dlock.Lease) error {
		log.Printf("writing with fencing token %d", l.Token())
		return nil
	})
	if err != nil {
		log.Print(err)
	}
}
