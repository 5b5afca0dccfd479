package temporallock

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// countedQueue is the task queue of replyToWorkflow.
const countedQueue = "dlock-test-counted"

// replyToWorkflow stands for a lock-taking workflow in countedHistory: it
// receives the mutex workflow's signals (grants, probes) until told "done".
func replyToWorkflow(ctx workflow.Context) error {
	workflow.GetSignalChannel(ctx, "done").Receive(ctx, nil)
	return nil
}

// countedHistory drives one name's mutex workflow through a counted
// request and returns its history. It speaks the wire format only (the
// driver's Acquire and Release, the "dlock.acquire" and "dlock.release"
// signals, the "state" query), so that a version of this package that
// kept one holder per name runs it too: testdata/counted-one-holder.json
// was recorded so, by the version before semaphores (3dc48ea), with this
// file copied into it.
//
// A takes one of 3 permits; then X, a workflow waiter (so that its grant
// is a signal, a command that replay compares), asks for one of 3 too:
// granted beside A by the counted rule (beside is then true), queued
// behind A by the one-holder workflow. A releases (X holds in both), X
// releases.
func countedHistory(t *testing.T, srv server, name string) (beside bool, hist *historypb.History) {
	t.Helper()
	d := srv.open(t, "")
	ctx := testenv.Context(t, 120*time.Second)
	w := worker.New(d.c, countedQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(replyToWorkflow, workflow.RegisterOptions{Name: "replyTo"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	to, err := d.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: countedQueue}, "replyTo")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.c.SignalWorkflow(context.WithoutCancel(ctx), to.GetID(), to.GetRunID(), "done", nil) }()

	holder := []byte(`{"note":"counted history","limit":3}`)
	a := driver.Request{Name: name, Owner: driver.NewNonce(), TTL: testTTL, Holder: holder, Limit: 3}
	g, err := d.Acquire(ctx, a)
	if err != nil {
		t.Fatalf("A, the first of 3 permits: %v", err)
	}
	id, x := WorkflowID(ModeFair, name), driver.NewNonce()
	err = d.c.SignalWorkflow(ctx, id, "", sigAcquire, acquireReq{Owner: x, TTL: testTTL, Holder: holder, Wait: true,
		ReplyTo: &caller{WorkflowID: to.GetID(), RunID: to.GetRunID()}})
	if err != nil {
		t.Fatal(err)
	}
	// The state as the query returns it, in fields that both versions have
	// or leave empty.
	type owner struct{ Owner string }
	type state struct {
		Holder *owner
		More   []owner
		Queue  []owner
	}
	await := func(what string, ok func(s state) bool) state {
		t.Helper()
		var s state
		testenv.Eventually(t, 60*time.Second, what, func() error {
			s = state{}
			if _, err := d.query(ctx, id, "", &s); err != nil {
				return err
			}
			if !ok(s) {
				return fmt.Errorf("state %+v", s)
			}
			return nil
		})
		return s
	}
	holds := func(s state, o string) bool {
		return s.Holder != nil && s.Holder.Owner == o || slices.Contains(s.More, owner{o})
	}
	s := await("X to be queued or granted", func(s state) bool { return holds(s, x) || len(s.Queue) == 1 })
	beside = holds(s, x)
	if err := d.Release(ctx, driver.Held{Name: name, Owner: a.Owner, Token: g.Token}); err != nil {
		t.Fatalf("A's release: %v", err)
	}
	await("X to hold alone", func(s state) bool { return s.Holder != nil && s.Holder.Owner == x && len(s.More) == 0 })
	if err := d.c.SignalWorkflow(ctx, id, "", sigRelease, ownerReq{Owner: x}); err != nil {
		t.Fatal(err)
	}
	await("the name to be free", func(s state) bool { return s.Holder == nil })
	hist, err = collectHistory(d.c.GetWorkflowHistory(ctx, id, "", false, 0))
	if err != nil {
		t.Fatal(err)
	}
	return beside, hist
}

// saveHistory writes hist as JSON to dir/file, the format of testdata.
func saveHistory(t *testing.T, dir, file string, hist *historypb.History) string {
	t.Helper()
	b, err := temporalproto.CustomJSONMarshalOptions{Indent: " "}.Marshal(hist)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, file)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// testCountedGrantReplays: a workflow waiter asking for one of 3 permits
// while another client holds one is granted at once, beside it, and the
// history of that (with the countedVersion marker) replays; with
// -update-histories it is saved as testdata/counted.json, which
// TestReplayRecordedHistories replays beside counted-one-holder.json, the
// same requests as the one-holder workflow answered them. Together they
// check that the counted rule is versioned both ways: a change that
// applied it to histories recorded without it, or that stopped applying
// it to histories recorded with it, fails to replay one of them.
func testCountedGrantReplays(t *testing.T, srv server) {
	beside, hist := countedHistory(t, srv, "counted-history/"+t.Name())
	if !beside {
		t.Errorf("a request for one of 3 permits was queued behind a holder of one")
	}
	dir := t.TempDir()
	if *updateHistories {
		dir = "testdata"
	}
	replay(t, []string{saveHistory(t, dir, "counted.json", hist)})
}
