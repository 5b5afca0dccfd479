package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
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

// The raw hand-off reference: a workflow that passes a turn between its
// clients with the fewest updates a hand-off can take, two: the next
// holder's "take" (held open until the turn is its) and the holder's
// "give".
const (
	turnTaskQueue = "dlock-bench-turn"
	turnWorkflow  = "BenchTurn"
	turnTake      = "take"
	turnGive      = "give"
)

// benchTurnWorkflow runs until it is terminated. A "take" returns when the
// turn is its caller's: at once if nobody has it, else once the takes
// ahead of it were given on, in arrival order. A "give" passes the turn to
// the oldest take waiting, or frees it. No lease, no token, no owner
// check, no renewal, no bound on the history: the least a turn passed by
// updates costs.
func benchTurnWorkflow(ctx workflow.Context) error {
	held := false
	var queue []string
	granted := map[string]bool{}
	if err := workflow.SetUpdateHandler(ctx, turnTake, func(ctx workflow.Context, id string) error {
		if !held {
			held = true
			return nil
		}
		queue = append(queue, id)
		err := workflow.Await(ctx, func() bool { return granted[id] })
		delete(granted, id)
		return err
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandler(ctx, turnGive, func(ctx workflow.Context) error {
		if len(queue) == 0 {
			held = false
			return nil
		}
		granted[queue[0]] = true
		queue = queue[1:]
		return nil
	}); err != nil {
		return err
	}
	return workflow.Await(ctx, func() bool { return false })
}

// temporalHandoff is the raw hand-off reference: workers pass a turn by
// benchTurnWorkflow (one per key, started by the first take), each worker
// with its own client and SDK worker, as dlock's. A waiter whose context
// ends keeps its take open in the background and gives the turn on when
// it comes, so that the next round is not stuck behind it.
func temporalHandoff(srv *testenv.Temporal) *lib {
	ho := &lib{backend: "temporal", name: "reference: raw hand-off", role: handoff,
		how: "not a library: a workflow that passes a turn, two updates a hand-off: take (update-with-start, held open until the turn is the caller's, FIFO) and give; no lease, token or renewal; every worker runs its own SDK worker, as dlock's"}
	nonce := rand.Text()
	ho.open = func(t testing.TB, ttl time.Duration) worker {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := client.DialContext(ctx, client.Options{HostPort: srv.Addr, Namespace: srv.Namespace, Logger: quietSDK()})
		if err != nil {
			t.Fatalf("temporal: %v", err)
		}
		w := tworker.New(c, turnTaskQueue, tworker.Options{})
		w.RegisterWorkflowWithOptions(benchTurnWorkflow, workflow.RegisterOptions{Name: turnWorkflow})
		if err := w.Start(); err != nil {
			t.Fatalf("temporal worker: %v", err)
		}
		id := func(key string) string { return "bench-turn-" + nonce + "-" + strings.ReplaceAll(key, " ", "_") }
		update := func(ctx context.Context, key, name string, args ...any) error {
			var h client.WorkflowUpdateHandle
			var err error
			if name == turnTake {
				h, err = c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
					StartWorkflowOperation: c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
						ID: id(key), TaskQueue: turnTaskQueue, WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
					}, turnWorkflow),
					UpdateOptions: client.UpdateWorkflowOptions{UpdateName: name, Args: args, WaitForStage: client.WorkflowUpdateStageCompleted},
				})
			} else {
				h, err = c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id(key), UpdateName: name, Args: args, WaitForStage: client.WorkflowUpdateStageCompleted})
			}
			if err != nil {
				return err
			}
			return h.Get(ctx, nil)
		}
		give := func(key string) { _ = update(context.Background(), key, turnGive) }
		var keys []string
		return worker{
			lock: func(ctx context.Context, key string) (func() error, error) {
				if !slices.Contains(keys, key) {
					keys = append(keys, key)
				}
				done := make(chan error, 1)
				go func() {
					tctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					done <- update(tctx, key, turnTake, rand.Text())
				}()
				select {
				case err := <-done:
					if err != nil {
						return nil, err
					}
					return func() error { give(key); return nil }, nil
				case <-ctx.Done():
					go func() {
						if <-done == nil {
							give(key)
						}
					}()
					return nil, ctx.Err()
				}
			},
			close: func() {
				for _, key := range keys {
					_ = c.TerminateWorkflow(context.Background(), id(key), "", "benchmark done")
				}
				w.Stop()
				c.Close()
			},
		}
	}
	return ho
}

// quietSDK drops the Temporal SDK's log lines.
func quietSDK() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))
}

// raisedInFlight is the limit of updates in flight on one workflow
// (history.maxInFlightUpdates) of the second server, the one of the
// raised-limit reference; the default is 10.
const raisedInFlight = 64

// temporalLibs are the libraries on srv; raised, if not nil, is a server
// started with history.maxInFlightUpdates=raisedInFlight, for the
// references of scenario B: the raw hand-off, and the raised-limit
// reference (dlock's fair mode, as on srv).
func temporalLibs(srv, raised *testenv.Temporal) []*lib {
	dl := &lib{backend: "temporal", name: "dlock-fair", role: ours,
		how: "backend/temporallock, fair mode (the mutex workflow), dlock.WithFair(); every worker runs its own SDK worker, as every client process does by default"}
	dl.open = func(t testing.TB, ttl time.Duration) worker {
		return dlockWorker(dl, openDlock(t, "temporal://"+srv.Addr+"/"+srv.Namespace, ttl), true, nil)
	}
	// Each held lock is a mutex workflow that the process's SDK workers
	// keep in their workflow cache (one for the process), with its
	// goroutines, until it is evicted; a task for an evicted workflow
	// replays its history.
	dl.shed = tworker.PurgeStickyWorkflowCache
	dl.shedWhat = "the SDK's workflow cache purged (worker.PurgeStickyWorkflowCache)"
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
			lock: func(ctx context.Context, key string) (func() error, error) {
				if err := ping(ctx); err != nil {
					return nil, err
				}
				return func() error { return ping(context.Background()) }, nil
			},
			close: func() {
				_ = c.TerminateWorkflow(context.Background(), id, "", "benchmark done")
				w.Stop()
				c.Close()
			},
		}
	}
	if raised == nil {
		return []*lib{dl, fl, temporalHandoff(srv)}
	}
	// The raw hand-off runs on the raised server: its 31 takes held open
	// at 32 workers pass the default limit, and on srv the storm that
	// follows (see the package doc of temporallock, "Many waiters") would
	// go on into the next library's round there.
	ho := temporalHandoff(raised)
	ho.how += fmt.Sprintf("; on the second dev server (history.maxInFlightUpdates=%d), whose limit admits the 31 takes held open at 32 workers", raisedInFlight)
	rl := &lib{backend: "temporal", name: raisedName, role: handoff,
		how: fmt.Sprintf("dlock-fair as above, on a second dev server started with history.maxInFlightUpdates=%d (the default is 10): past the limit, the server refuses an update and drops the workflow's cached state, aborting the updates in flight (temporallock's package doc, \"Many waiters\")", raisedInFlight)}
	rl.open = func(t testing.TB, ttl time.Duration) worker {
		return dlockWorker(rl, openDlock(t, "temporal://"+raised.Addr+"/"+raised.Namespace, ttl), true, nil)
	}
	return []*lib{dl, fl, ho, rl}
}

// raisedName is the raised-limit reference's name.
var raisedName = fmt.Sprintf("reference: dlock-fair, %d updates in flight", raisedInFlight)
