package temporallock

import (
	"time"

	"go.temporal.io/sdk/workflow"
)

// idLockWorkflowName is the workflow of id mode: one run is one lease.
const idLockWorkflowName = "dlock.IDLock"

// idLockState is the input of an id-mode lock run, what it carries across
// continue-as-new, and what its "state" query returns.
type idLockState struct {
	Name   string
	Owner  string
	TTL    time.Duration
	Holder []byte `json:",omitempty"`
	// Token is the fencing token; zero in the first run, which takes its
	// own start time in microseconds (see the package doc).
	Token uint64 `json:",omitempty"`
	// Expires is the end of the lease (workflow time); zero in the first
	// run, whose lease starts when it starts.
	Expires      time.Time `json:",omitzero"`
	HistoryLimit int       `json:",omitempty"`
}

// idTokenOf is the fencing token of a run that started at t.
func idTokenOf(t time.Time) uint64 { return uint64(t.UnixMicro()) }

// IDLockWorkflow holds an id-mode lock: while it runs, no other run with
// the same workflow ID can start (ID-conflict policy FAIL). It ends when its
// lease, renewed by update "extend", runs out — a workflow timer, so the
// lock frees itself without any client. Release (by the owner, naming its
// own run) and Break (by an administrator) terminate it.
func IDLockWorkflow(ctx workflow.Context, s idLockState) error {
	info := workflow.GetInfo(ctx)
	if s.Token == 0 {
		s.Token = idTokenOf(info.WorkflowStartTime)
	}
	if s.Expires.IsZero() {
		s.Expires = info.WorkflowStartTime.Add(s.TTL)
	}
	changed := false
	if err := workflow.SetQueryHandler(ctx, qryState, func() (idLockState, error) { return s, nil }); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandler(ctx, updExtend, func(ctx workflow.Context, r extendReq) (reply, error) {
		now := workflow.Now(ctx)
		if r.Owner != s.Owner || !now.Before(s.Expires) {
			return reply{Status: stLost}, nil
		}
		s.Expires, s.TTL, changed = now.Add(r.TTL), r.TTL, true
		return reply{Status: stOK, Token: s.Token}, nil
	}); err != nil {
		return err
	}

	limit := s.HistoryLimit
	if limit <= 0 {
		limit = defaultHistoryLimit
	}
	for {
		now := workflow.Now(ctx)
		if !now.Before(s.Expires) {
			return nil // the lease is over: the run ends and the name is free
		}
		changed = false
		if _, err := workflow.AwaitWithTimeout(ctx, s.Expires.Sub(now), func() bool { return changed }); err != nil {
			return err
		}
		if info := workflow.GetInfo(ctx); info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() >= limit {
			if err := awaitHandlersFinished(ctx); err != nil {
				return err
			}
			return workflow.NewContinueAsNewError(ctx, IDLockWorkflow, s)
		}
	}
}

// awaitHandlersFinished waits until no update handler is running, before
// the run continues as new. It looks again every half second: a handler's
// end is not an event that re-evaluates an Await condition by itself.
// handlersRecheck is how often awaitHandlersFinished looks again: often
// enough not to delay a continue-as-new noticeably, seldom enough to add
// few timers to the history.
const handlersRecheck = 500 * time.Millisecond

func awaitHandlersFinished(ctx workflow.Context) error {
	for !workflow.AllHandlersFinished(ctx) {
		if _, err := workflow.AwaitWithTimeout(ctx, handlersRecheck, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
			return err
		}
	}
	return nil
}
