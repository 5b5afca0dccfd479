package temporallock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
)

// WorkflowLockOptions configure Lock.
type WorkflowLockOptions struct {
	// TTL is the lease: the lock-holding workflow renews it by signal every
	// TTL/3 while it holds the lock; if the workflow stops (terminated,
	// reset, its workers gone), the lock passes on within TTL. Default 1m.
	TTL time.Duration
	// TaskQueue is the task queue of the mutex workflows (default
	// "dlock"); it must be the one the clients of the same locks use.
	TaskQueue string
	// Note is free text shown as the holder's note by Inspect.
	Note string
}

// WorkflowLease is a lock held by a workflow (see Lock).
type WorkflowLease struct {
	name, owner, mutexID string
	token                uint64
	ttl                  time.Duration
	lost                 workflow.ReceiveChannel
	probes               workflow.ReceiveChannel
	isLost, released     bool
	stopRenew            workflow.CancelFunc
}

// Token is the lease's fencing token.
func (l *WorkflowLease) Token() uint64 { return l.token }

// Name is the lock's name.
func (l *WorkflowLease) Name() string { return l.name }

// Lost reports, without blocking, whether the mutex workflow told this
// workflow that its lease ended (it expired because renewals stopped
// arriving, or an administrator broke it).
func (l *WorkflowLease) Lost() bool {
	if !l.isLost && l.lost.ReceiveAsync(nil) {
		l.isLost = true
	}
	return l.isLost
}

// LostChannel receives a value when the lease is lost, for a selector.
func (l *WorkflowLease) LostChannel() workflow.ReceiveChannel { return l.lost }

// Unlock releases the lock (by signal: it does not wait for the mutex
// workflow). It returns an error wrapping dlock.ErrLeaseLost if the lease
// was already lost.
func (l *WorkflowLease) Unlock(ctx workflow.Context) error {
	if l.released {
		return fmt.Errorf("%w: %q", dlock.ErrNotHeld, l.name)
	}
	l.released = true
	l.stopRenew()
	drain(l.probes)
	if l.Lost() {
		return fmt.Errorf("%w: %q", dlock.ErrLeaseLost, l.name)
	}
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	return workflow.SignalExternalWorkflow(ctx, l.mutexID, "", sigRelease, ownerReq{Owner: l.owner}).Get(ctx, nil)
}

const (
	// requestTimeout bounds one attempt of the local activity that asks the
	// mutex workflow for the lock: it only enqueues (the grant comes as a
	// signal), so this is far above a healthy round trip.
	requestTimeout = 30 * time.Second
	// requestRetryCap caps the back-off between its attempts, so a
	// workflow waiting for a lock notices a recovered server within seconds.
	requestRetryCap = 5 * time.Second
)

// Lock takes the fair-mode lock name from inside a workflow, waiting in the
// same FIFO queue as clients that use dlock.Open("temporal://…") or New, and
// returns its lease. It is deterministic and replay-safe: the owner key is
// drawn in a side effect, the request goes out by a local activity that
// signals-with-start the name's mutex workflow, and the grant comes back as
// a signal. While held, the lease is renewed by signal every TTL/3 from a
// workflow goroutine; call Unlock when done. If ctx is cancelled while
// waiting, Lock leaves the queue and returns ctx's error. While it waits,
// the mutex workflow signals it once a TTL to learn whether it still
// runs: a waiting workflow that closes (terminated, timed out, failed)
// leaves the queue at the next such probe, within a TTL.
//
// The workflow's worker needs nothing registered for this (the local
// activity is passed by value), but the mutex workflows need a worker on
// their task queue: a dlock Temporal client, or RegisterWorkflows.
func Lock(ctx workflow.Context, name string, opts WorkflowLockOptions) (*WorkflowLease, error) {
	if err := dlock.ValidateName(name); err != nil {
		return nil, err
	}
	if opts.TTL <= 0 {
		opts.TTL = time.Minute
	}
	if opts.TTL < time.Second {
		return nil, fmt.Errorf("%w: TTL %v: the shortest lease is 1s", dlock.ErrInvalidOption, opts.TTL)
	}
	if opts.TaskQueue == "" {
		opts.TaskQueue = DefaultTaskQueue
	}
	var owner string
	if err := workflow.SideEffect(ctx, func(workflow.Context) any {
		return driver.NewNonce()
	}).Get(&owner); err != nil {
		return nil, err
	}
	info := workflow.GetInfo(ctx)
	holder, _ := json.Marshal(dlock.Holder{Note: opts.Note + " (workflow " + info.WorkflowExecution.ID + ")", AcquiredAt: workflow.Now(ctx).UTC()})
	req := acquireReq{Owner: owner, TTL: opts.TTL, Holder: holder, Wait: true,
		ReplyTo: &caller{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID}}
	mutexID := WorkflowID(ModeFair, name)
	l := &WorkflowLease{name: name, owner: owner, mutexID: mutexID, ttl: opts.TTL,
		lost:   workflow.GetSignalChannel(ctx, sigLostPrefix+owner),
		probes: workflow.GetSignalChannel(ctx, sigQueuedPrefix+owner)}
	grants := workflow.GetSignalChannel(ctx, sigGrantPrefix+owner)

	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: requestTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: requestRetryCap},
	})
	if err := workflow.ExecuteLocalActivity(lctx, requestLock, mutexID, opts.TaskQueue, name, req).Get(lctx, nil); err != nil {
		return nil, err
	}

	var g grantMsg
	var err error
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(grants, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, &g) })
	sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { err = ctx.Err() })
	sel.Select(ctx)
	drain(l.probes)
	if err != nil {
		// Leave the queue, or give back a grant that raced the cancel.
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		_ = workflow.SignalExternalWorkflow(dctx, mutexID, "", sigRelease, ownerReq{Owner: owner}).Get(dctx, nil)
		return nil, err
	}
	l.token = g.Token

	rctx, cancel := workflow.WithCancel(ctx)
	l.stopRenew = cancel
	workflow.Go(rctx, func(ctx workflow.Context) {
		for {
			if workflow.Sleep(ctx, l.ttl/3) != nil || l.Lost() {
				return
			}
			f := workflow.SignalExternalWorkflow(ctx, mutexID, "", sigExtend, extendReq{Owner: owner, Token: l.token, TTL: l.ttl})
			if err := f.Get(ctx, nil); err != nil && !errors.Is(err, workflow.ErrCanceled) && !temporal.IsCanceledError(err) {
				l.isLost = true // the mutex workflow is gone
				return
			}
		}
	})
	return l, nil
}

// drain receives the probes that reached a waiter (they need no answer:
// that they were delivered is the answer), so that none is left unhandled.
func drain(c workflow.ReceiveChannel) {
	for c.ReceiveAsync(nil) {
	}
}

// requestLock is the local activity of Lock: signal-with-start, so that
// the first request for a name creates its mutex workflow.
func requestLock(ctx context.Context, mutexID, taskQueue, name string, req acquireReq) error {
	_, err := activity.GetClient(ctx).SignalWithStartWorkflow(ctx, mutexID, sigAcquire, req, mutexStart(mutexID, taskQueue),
		mutexWorkflowName, mutexState{Name: name})
	return err
}
