package bench

import (
	"context"
	"crypto/rand"
	"log/slog"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	tworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	_ "github.com/dlock/dlock/backend/temporallock"
	"github.com/dlock/dlock/internal/testenv"
)

// The floor of a Temporal lock: a workflow that answers an update at once,
// run by a worker of the benchmark's own, on a task queue of its own.
const (
	floorTaskQueue = "dlock-bench-floor"
	floorWorkflow  = "BenchFloor"
	floorUpdate    = "ping"
)

// benchFloorWorkflow runs until it is terminated, and answers every "ping"
// update at once: an update round trip with a workflow task and nothing
// else in it, the least that a lock held in a workflow pays per request.
func benchFloorWorkflow(ctx workflow.Context) error {
	if err := workflow.SetUpdateHandler(ctx, floorUpdate, func(ctx workflow.Context) error { return nil }); err != nil {
		return err
	}
	return workflow.Await(ctx, func() bool { return false })
}

// quietSDK drops the Temporal SDK's log lines.
func quietSDK() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))
}

func temporalLibs(srv *testenv.Temporal) []*lib {
	dl := &lib{backend: "temporal", name: "dlock-fair", role: ours,
		how: "backend/temporallock, fair mode (the mutex workflow), dlock.WithFair(); every worker runs its own SDK worker, as every client process does by default"}
	dl.open = func(t testing.TB, ttl time.Duration) worker {
		return dlockWorker(dl, openDlock(t, "temporal://"+srv.Addr+"/"+srv.Namespace, ttl), true, nil)
	}
	fl := &lib{backend: "temporal", name: "floor: 2 updates", role: floor,
		how: "two updates of a running workflow that answers them at once (Temporal SDK client, UpdateWorkflow waiting for completion; the workflow on a worker of its own)"}
	fl.open = func(t testing.TB, ttl time.Duration) worker {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := client.DialContext(ctx, client.Options{HostPort: srv.Addr, Namespace: srv.Namespace, Logger: quietSDK()})
		if err != nil {
			t.Fatalf("temporal: %v", err)
		}
		w := tworker.New(c, floorTaskQueue, tworker.Options{})
		w.RegisterWorkflowWithOptions(benchFloorWorkflow, workflow.RegisterOptions{Name: floorWorkflow})
		if err := w.Start(); err != nil {
			t.Fatalf("temporal worker: %v", err)
		}
		id := "bench-floor-" + rand.Text()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: floorTaskQueue}, floorWorkflow)
		if err != nil {
			t.Fatalf("temporal: start floor workflow: %v", err)
		}
		ping := func(ctx context.Context) error {
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
				WorkflowID: id, RunID: run.GetRunID(), UpdateName: floorUpdate, WaitForStage: client.WorkflowUpdateStageCompleted,
			})
			if err != nil {
				return err
			}
			return h.Get(ctx, nil)
		}
		return worker{
			lock: func(ctx context.Context, key string) (func(), error) {
				if err := ping(ctx); err != nil {
					return nil, err
				}
				return func() { _ = ping(context.Background()) }, nil
			},
			close: func() {
				_ = c.TerminateWorkflow(context.Background(), id, "", "benchmark done")
				w.Stop()
				c.Close()
			},
		}
	}
	return []*lib{dl, fl}
}
