package redislock_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/redislock"
)

// A dlock client over a go-redis client the program already has.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	d, err := redislock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	c := dlock.New(d, dlock.WithFair())
	defer c.Close()

	ctx := context.Background()
	err = c.Do(ctx, "orders/42", func(ctx context.Context, l *dlock.Lease) error {
		fmt.Println("writing with fencing token", l.Token())
		return nil
	})
	if err != nil {
		log.Print(err)
	}
}

// Opening by URL: the package registers redis:// and rediss://.
func ExampleOpen() {
	ctx := context.Background()
	c, err := dlock.Open(ctx, "redis://locker:secret@localhost:6379/0?prefix=myapp")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	info, err := c.Inspect(ctx, "orders/42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Held, info.Token, info.ExpiresIn)
}
