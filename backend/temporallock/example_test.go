package temporallock_test

import (
	"context"
	"log"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/temporallock"
)

// Open by URL: fair mode, a worker for the lock workflows in this process.
func Example() {
	ctx := context.Background()
	c, err := dlock.Open(ctx, "temporal://127.0.0.1:7233/default?mode=fair")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	err = c.Do(ctx, "orders/42", func(ctx context.Context, l *dlock.Lease) error {
		log.Printf("holding orders/42 with token %d", l.Token())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// A dlock client over a Temporal client the program already has; the
// driver runs a worker for the lock workflows on it.
func ExampleNew() {
	tc, err := client.Dial(client.Options{HostPort: "127.0.0.1:7233", Namespace: "default"})
	if err != nil {
		log.Fatal(err)
	}
	defer tc.Close()
	d, err := temporallock.New(tc, temporallock.WithMode(temporallock.ModeFair))
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

// With the application's own Temporal client and worker: the lock
// workflows run on the application's worker, which polls dlock's task
// queue.
func ExampleRegisterWorkflows() {
	tc, err := client.Dial(client.Options{HostPort: "127.0.0.1:7233"})
	if err != nil {
		log.Fatal(err)
	}
	defer tc.Close()
	w := worker.New(tc, temporallock.DefaultTaskQueue, worker.Options{})
	temporallock.RegisterWorkflows(w)
	if err := w.Start(); err != nil {
		log.Fatal(err)
	}
	defer w.Stop()

	d, err := temporallock.New(tc, temporallock.WithoutWorker())
	if err != nil {
		log.Fatal(err)
	}
	c := dlock.New(d)
	defer c.Close()
}

// A workflow takes a lock, does its work under it, and releases it. The
// lease's token goes with every write, so a store can refuse stale ones.
func ExampleLock() {
	_ = func(ctx workflow.Context, order string) error {
		l, err := temporallock.Lock(ctx, "orders/"+order, temporallock.WorkflowLockOptions{TTL: time.Minute})
		if err != nil {
			return err
		}
		defer func() { _ = l.Unlock(ctx) }()
		opts := workflow.ActivityOptions{StartToCloseTimeout: time.Minute}
		return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), "WriteOrder", order, l.Token()).Get(ctx, nil)
	}
}
