package zklock_test

import (
	"context"
	"log"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/zklock"
)

// A dlock client over a ZooKeeper connection the program already has. The
// driver derives its leases from the session timeout, which go-zookeeper
// does not expose: give it the one asked of zk.Connect.
func ExampleNew() {
	const session = 10 * time.Second
	conn, _, err := zk.Connect([]string{"127.0.0.1:2181"}, session)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	d, err := zklock.New(conn, zklock.WithSessionTimeout(session), zklock.WithRoot("/myapp/locks"))
	if err != nil {
		log.Fatal(err)
	}
	c := dlock.New(d)
	defer c.Close()

	ctx := context.Background()
	l, err := c.Mutex("orders/42").TryLock(ctx)
	if err != nil {
		log.Fatal(err) // errors.Is(err, dlock.ErrNotAcquired) when someone holds it
	}
	defer l.Unlock(ctx)
}
