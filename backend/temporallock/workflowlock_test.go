package temporallock

import (
	"flag"
	"github.com/dlock/dlock/internal/testenv"
	"os"
	"path/filepath"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/dlock/dlock"
)

var updateHistories = flag.Bool("update-histories", false, "rewrite testdata/*.json with histories recorded by this run")

const callerQueue = "dlock-test-callers"

// lockedWork is a workflow that takes a lock with the workflow-side API,
// holds it for hold (a workflow timer), and returns its token.
func lockedWork(ctx workflow.Context, name string, hold time.Duration) (uint64, error) {
	l, err := Lock(ctx, name, WorkflowLockOptions{TTL: 10 * time.Second, Note: "lockedWork"})
	if err != nil {
		return 0, err
	}
	if err := workflow.Sleep(ctx, hold); err != nil {
		return 0, err
	}
	if l.Lost() {
		return 0, dlock.ErrLeaseLost
	}
	return l.Token(), l.Unlock(ctx)
}

// startCallers runs a worker of the caller workflows on d's client until
// t ends.
func startCallers(t *testing.T, d *Driver) {
	t.Helper()
	w := worker.New(d.c, callerQueue, worker.Options{})
	registerCallers(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
}

func registerCallers(r WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(lockedWork, workflow.RegisterOptions{Name: "lockedWork"})
}

// testWorkflowLock: two workflows and a client share one fair lock. The
// client holds it first; the workflows queue behind it in order and are
// granted it in turn (holding it across several renewals), and the client
// gets it back after them, every token higher than the last. The histories
// of a lock-taking workflow and of the mutex workflow (which continues as
// new during the test) are then replayed, and with -update-histories saved
// as the testdata of TestReplayRecordedHistories.
func testWorkflowLock(t *testing.T, srv server) {
	d := srv.open(t, "", withHistoryLimit(60))
	c := dlock.New(d, dlock.WithTTL(testTTL))
	startCallers(t, d)

	name := "workflow-lock/" + t.Name()
	ctx := testenv.Context(t, 180*time.Second)
	l0, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	firstRun := runOfMutex(t, d, name)
	var runs []client.WorkflowRun
	for i := range 2 {
		run, err := d.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: callerQueue}, "lockedWork", name, 8*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run)
		waitWaiters(t, c, name, i+1)
	}
	if err := l0.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	last := l0.Token()
	for i, run := range runs {
		var tok uint64
		if err := run.Get(ctx, &tok); err != nil {
			t.Fatalf("workflow %d: %v", i, err)
		}
		if tok <= last {
			t.Errorf("workflow %d got token %d, want > %d (in queue order)", i, tok, last)
		}
		last = tok
	}
	l1, err := c.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("client after the workflows: %v", err)
	}
	if l1.Token() <= last {
		t.Errorf("client's token %d, want > %d", l1.Token(), last)
	}
	if err := l1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if now := runOfMutex(t, d, name); now == firstRun {
		t.Errorf("the mutex workflow did not continue as new (history limit 60)")
	}

	dir := t.TempDir()
	if *updateHistories {
		dir = "testdata"
	}
	save := func(file, id, runID string) string {
		it := d.c.GetWorkflowHistory(ctx, id, runID, false, 0)
		var events []byte
		hist, err := collectHistory(it)
		if err == nil {
			events, err = temporalproto.CustomJSONMarshalOptions{Indent: " "}.Marshal(hist)
		}
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, events, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	files := []string{
		save("lockedWork.json", runs[0].GetID(), runs[0].GetRunID()),
		save("mutex.json", WorkflowID(ModeFair, name), firstRun),
	}
	replay(t, files)
}

func runOfMutex(t *testing.T, d *Driver, name string) string {
	t.Helper()
	desc, err := d.describe(testenv.Context(t, 30*time.Second), WorkflowID(ModeFair, name), "")
	if err != nil {
		t.Fatal(err)
	}
	return desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

func replay(t *testing.T, files []string) {
	t.Helper()
	r := worker.NewWorkflowReplayer()
	RegisterWorkflows(r)
	registerCallers(r)
	for _, f := range files {
		if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
			t.Errorf("replay %s: %v", f, err)
		}
	}
}

// TestReplayRecordedHistories replays histories recorded from real runs
// (testdata, written by go test -run
// 'TestOnTemporalDevServer/(WorkflowLock|CountedGrantReplays)'
// -update-histories; counted-one-holder.json by an older version, see
// countedHistory): a change to the lock workflows or the workflow-side
// API that is not replay-compatible fails here.
func TestReplayRecordedHistories(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.json")
	if len(files) == 0 {
		t.Fatal("no recorded histories in testdata")
	}
	replay(t, files)
}

func collectHistory(it client.HistoryEventIterator) (*historypb.History, error) {
	h := &historypb.History{}
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, err
		}
		h.Events = append(h.Events, e)
	}
	return h, nil
}
