package redlock_test

import (
	"context"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/redlock"
)

// A dlock client over go-redis clients of three independent nodes.
func ExampleNew() {
	var nodes []redis.UniversalClient
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"} {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		nodes = append(nodes, rdb)
	}
	d, err := redlock.New(nodes)
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
