package temporallock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/dlock/dlock/driver"
)

// idLocker is the Driver in id mode, seen as a driver.Retrier and
// driver.Subscriber: the engine can only try to start the lock's workflow,
// and tell when the running one ends.
type idLocker Driver

var (
	_ driver.Retrier    = (*idLocker)(nil)
	_ driver.Subscriber = (*idLocker)(nil)
)

// startOptions are the start options of an id-mode lock run. Each one is
// load-bearing:
//
//   - WorkflowIDConflictPolicy FAIL: a start while a run with this ID is
//     running fails. This, not the reuse policy, is what makes the lock
//     exclusive.
//   - WorkflowIDReusePolicy ALLOW_DUPLICATE: a start after the last run
//     closed (released, expired, broken) succeeds. REJECT_DUPLICATE would
//     lock the name out until the closed run leaves retention.
//   - WorkflowExecutionErrorWhenAlreadyStarted: without it the Go SDK
//     answers a start that conflicts with a running workflow by returning
//     that workflow's run — no error — and the caller would believe it
//     holds the lock.
func (l *idLocker) startOptions(name string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                                       WorkflowID(ModeID, name),
		TaskQueue:                                l.cfg.taskQueue,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		WorkflowTaskTimeout:                      workflowTaskTimeout,
	}
}

// TryAcquire starts the lock run and reads its start time, the fencing
// token. Neither call needs a worker. Its ctx is AcquireByRetry's
// per-attempt context, detached from the caller's: a deadline there is
// the server not answering in time (ErrUnavailable), never the caller's
// (AcquireByRetry returns the caller's own error when that ends).
func (l *idLocker) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, time.Duration, error) {
	run, err := l.c.ExecuteWorkflow(ctx, l.startOptions(req.Name), idLockWorkflowName, idLockState{
		Name: req.Name, Owner: req.Owner, TTL: req.TTL, Holder: req.Holder, HistoryLimit: l.cfg.historyLimit,
	})
	if err != nil {
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) {
			return driver.Grant{}, 0, fmt.Errorf("%w: %q", driver.ErrNotAcquired, req.Name)
		}
		return driver.Grant{}, 0, asUnavailable("start "+strconv.Quote(req.Name), err)
	}
	desc, err := (*Driver)(l).describe(ctx, run.GetID(), run.GetRunID())
	if err != nil {
		// We hold the lock but cannot tell its token: give it back.
		_ = l.c.TerminateWorkflow(context.WithoutCancel(ctx), run.GetID(), run.GetRunID(), "dlock: token unknown")
		return driver.Grant{}, 0, asUnavailable("describe "+strconv.Quote(req.Name), err)
	}
	token := idTokenOf(desc.GetWorkflowExecutionInfo().GetStartTime().AsTime())
	return driver.Grant{Token: token, Handle: run.GetRunID()}, 0, nil
}

// Release ends the lease's own run. It terminates the running run of the
// lease's chain (named by its first run ID: the chain continues as new):
// that chain is this owner's lease and nobody else's (a later holder has a
// chain of its own), so this is owner-checked by construction, and it needs
// no worker — a release works even while no worker runs. A run that has
// already ended (its lease ran out, or it was broken) is ErrLeaseLost.
func (l *idLocker) Release(ctx context.Context, h driver.Held) error {
	run, _ := h.Handle.(string)
	if run == "" {
		return fmt.Errorf("%w: %q: no run to release", driver.ErrLeaseLost, h.Name)
	}
	err := l.c.TerminateWorkflowWithOptions(ctx, client.TerminateWorkflowOptions{
		WorkflowID: WorkflowID(ModeID, h.Name), FirstExecutionRunID: run, Reason: "dlock: released",
	})
	if err != nil {
		if isNotFound(err) {
			return fmt.Errorf("%w: %q (token %d) is no longer held by this owner", driver.ErrLeaseLost, h.Name, h.Token)
		}
		return unavailable(ctx, "release "+strconv.Quote(h.Name), err)
	}
	return nil
}

const (
	// freeNamePoll is how often a waiter looks for a new lock run while
	// the name is free: the waiter itself tries to start one meanwhile, so
	// this only catches another client's run that started first.
	freeNamePoll = 250 * time.Millisecond
	// describeRetry is the pause after a failed describe, longer so that an
	// unreachable server is not asked four times a second per waiter.
	describeRetry = time.Second
)

// Subscribe wakes the waiter each time the running lock run ends, by
// long-polling for its close event: no fixed-interval poll while the lock
// is held. While the name is free it looks every quarter second for a new
// run to follow (the waiter is trying to start one itself then).
func (l *idLocker) Subscribe(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	wake := make(chan struct{}, 1)
	id := WorkflowID(ModeID, name)
	notify := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	go func() {
		defer stop()
		woken := "" // the run whose end we last reported
		for sctx.Err() == nil {
			pause := driver.Jitter(freeNamePoll)
			desc, err := (*Driver)(l).describe(sctx, id, "")
			run := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
			switch {
			case err == nil && desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
				_ = l.c.GetWorkflow(sctx, id, run).Get(sctx, nil)
				woken = run
				notify()
				continue
			case err == nil && run != woken:
				// A run started and ended between two looks (a short
				// hold): its end is a release we must not miss.
				woken = run
				notify()
			case err != nil && !isNotFound(err):
				pause = driver.Jitter(describeRetry)
			}
			select {
			case <-sctx.Done():
			case <-l.stopSub:
				return
			case <-time.After(pause):
			}
		}
	}()
	return wake, stop, nil
}

// breakLock terminates the running lock run.
func (l *idLocker) breakLock(ctx context.Context, name string) error {
	err := l.c.TerminateWorkflow(ctx, WorkflowID(ModeID, name), "", "dlock: Break")
	if err != nil {
		if isNotFound(err) {
			return fmt.Errorf("%w: %q", driver.ErrNotHeld, name)
		}
		return unavailable(ctx, "terminate "+strconv.Quote(name), err)
	}
	return nil
}

func (l *idLocker) inspect(ctx context.Context, name string) (driver.Info, error) {
	in, found, err := l.inspectRun(ctx, WorkflowID(ModeID, name), "")
	if !found {
		in = driver.Info{Name: name}
	}
	return in, err
}

// inspectRun reports a running lock run; found is false when none runs.
func (l *idLocker) inspectRun(ctx context.Context, id, runID string) (driver.Info, bool, error) {
	desc, err := (*Driver)(l).describe(ctx, id, runID)
	if err != nil {
		if isNotFound(err) {
			return driver.Info{}, false, nil
		}
		return driver.Info{}, false, unavailable(ctx, "describe "+id, err)
	}
	if desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return driver.Info{}, false, nil
	}
	var s idLockState
	found, err := (*Driver)(l).query(ctx, id, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId(), &s)
	if err != nil || !found {
		return driver.Info{}, false, err
	}
	if s.Token == 0 { // the run has not had its first workflow task yet
		s.Token = idTokenOf(desc.GetWorkflowExecutionInfo().GetStartTime().AsTime())
	}
	in := driver.Info{Name: s.Name, Held: true, Token: s.Token, Holder: s.Holder}
	if !s.Expires.IsZero() {
		in.ExpiresIn = max(time.Until(s.Expires), 0)
	}
	return in, true, nil
}
