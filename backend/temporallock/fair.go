package temporallock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/dlock/dlock/driver"
)

// Bounds of one round trip of an acquire. A waiter's "wait" update returns
// within waitSlice; the rest is room for a slow or restarting server.
const (
	callTimeout    = 30 * time.Second
	unreachableFor = 90 * time.Second // a waiter gives up after this long without an answer
)

// fairAcquire asks the name's mutex workflow for the lock by
// update-with-start (starting the workflow if it is not running) and gets a
// synchronous granted, busy or queued. A queued waiter then long-polls with
// "wait" updates, each of which returns as soon as the lock is granted to
// it, or after a slice of its TTL; each also renews its place in the queue,
// so a waiter that crashed is dropped within its TTL.
//
// Every call runs detached from ctx so that its outcome is known; when ctx
// ends first, the owner's entry is removed (or its grant released) once the
// call in flight has reached the workflow, so a cancelled Lock leaves
// nothing behind.
func (d *Driver) fairAcquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	ar := acquireReq{Owner: req.Owner, TTL: req.TTL, Holder: req.Holder, Wait: req.Wait, Poll: true}
	sent := driver.Now()
	var rep reply
	var err error
	if req.Wait && d.contended.recent(req.Name) {
		rep, err = d.queueBySignal(ctx, req, ar)
	} else {
		rep, err = d.acquireDetached(ctx, req, ar)
	}
	if err != nil {
		return driver.Grant{}, err
	}

	failingSince := time.Time{}
	for {
		switch rep.Status {
		case stGranted:
			d.contended.note(req.Name, rep.Waiting, true)
			g := driver.Grant{Token: rep.Token, Since: sent.Add(rep.Waited - rep.Age), Recovered: rep.Recovered}
			if driver.Since(g.Since) < req.TTL/3 {
				return g, nil
			}
			// The answer took long to arrive (the wait sat in the server,
			// say while no worker ran), so what we know of the lease's
			// start is too old to be useful: renew it once to start
			// afresh, or learn that it is gone already.
			g.Since = driver.Now()
			ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
			err := d.Extend(ectx, driver.Held{Name: req.Name, Owner: req.Owner, Token: g.Token}, req.TTL)
			cancel()
			if err == nil {
				if ctx.Err() != nil {
					d.leaveQueue(req, nil)
					return driver.Grant{}, ctx.Err()
				}
				return g, nil
			}
			rep = reply{Status: stGone}
			continue
		case stBusy:
			return driver.Grant{}, fmt.Errorf("%w: %q", driver.ErrNotAcquired, req.Name)
		case stGone:
			// Our place was lost (we could not ask again within the TTL,
			// say while the server restarted): queue again, at the back.
			sent = driver.Now()
			if rep, err = d.acquireDetached(ctx, req, ar); err != nil {
				return driver.Grant{}, err
			}
			continue
		case stQueued:
			d.contended.note(req.Name, rep.Waiting, false)
			// Too far back in the queue to hold a wait open: ask again
			// when the workflow says.
			if rep.RetryAfter > 0 && !d.pollPlace(ctx, req, rep, sent.Add(waitSlice(req.TTL))) {
				return driver.Grant{}, ctx.Err()
			}
		default:
			return driver.Grant{}, fmt.Errorf("%w: temporal: unexpected reply %q", driver.ErrUnavailable, rep.Status)
		}

		sent = driver.Now()
		accepted, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
			defer cancel()
			rep, err = d.waitUpdate(cctx, req.Name, req.Owner, accepted)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			// Once the wait is in the workflow, a release sent now is
			// handled after it: it ends the wait and leaves the queue.
			d.leaveQueue(req, accepted)
			return driver.Grant{}, ctx.Err()
		}
		if err == nil {
			failingSince = time.Time{}
			continue
		}
		// The wait failed or got no answer in time. If the server
		// answers, the workflow is slow (its task sat with a worker that
		// stopped, or no worker runs): a slow answer, and the waiter
		// waits on as long as ctx lets it. If not, the server is
		// unreachable or restarting: keep our place by asking again, for
		// a while.
		if d.reachable(ctx) {
			failingSince = time.Time{}
		} else if failingSince.IsZero() {
			failingSince = time.Now()
		} else if time.Since(failingSince) > unreachableFor {
			d.leaveQueue(req, nil)
			return driver.Grant{}, unavailable(ctx, "wait "+strconv.Quote(req.Name), err)
		}
		rep = reply{Status: stQueued}
		if !d.pauseQueued(ctx, req, unreachablePause) {
			return driver.Grant{}, ctx.Err()
		}
	}
}

// pauseQueued waits about wait (jittered) between a queued waiter's
// requests; if ctx ends first, it leaves the queue and reports false.
func (d *Driver) pauseQueued(ctx context.Context, req driver.Request, wait time.Duration) bool {
	t := time.NewTimer(driver.Jitter(wait))
	defer t.Stop()
	select {
	case <-ctx.Done():
		d.leaveQueue(req, nil)
		return false
	case <-t.C:
		return true
	}
}

// placeTimeout bounds one "place" query.
const placeTimeout = 5 * time.Second

// unreachablePause is how long a queued waiter whose request failed waits
// before asking again: the server was reachable a moment ago (reachable
// said so), so it is likely back within a few hundred milliseconds.
const unreachablePause = 500 * time.Millisecond

// pollPlace waits, for a queued waiter too far back to hold a wait open,
// until it should send its next "wait": rep.RetryAfter, and while the
// workflow says to ask by query (rep.Query, far back in the queue), as
// long as the "place" queries answer "not yet". A query does not renew
// the waiter's place, so the wait is sent by renewBy whatever the answers;
// a failed query (a server restarting) ends the polling too, and the wait
// tells. If ctx ends first, it leaves the queue and reports false.
func (d *Driver) pollPlace(ctx context.Context, req driver.Request, rep reply, renewBy time.Time) bool {
	for {
		wait := min(rep.RetryAfter, driver.Until(renewBy))
		if wait > 0 && !d.pauseQueued(ctx, req, wait) {
			return false
		}
		if !rep.Query || !driver.Now().Before(renewBy) {
			return true
		}
		var err error
		rep, err = d.place(ctx, req, min(placeTimeout, driver.Until(renewBy)))
		if ctx.Err() != nil {
			d.leaveQueue(req, nil)
			return false
		}
		if err != nil || rep.Status != stQueued || rep.RetryAfter <= 0 {
			return true
		}
	}
}

// place asks the name's mutex workflow where req.Owner stands (the "place"
// query).
func (d *Driver) place(ctx context.Context, req driver.Request, timeout time.Duration) (reply, error) {
	qctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := d.c.QueryWorkflow(qctx, d.workflowID(req.Name), "", qryPlace, req.Owner)
	var rep reply
	if err == nil {
		err = v.Get(&rep)
	}
	return rep, err
}

// acquireDetached sends the acquire update detached from ctx; see
// fairAcquire.
func (d *Driver) acquireDetached(ctx context.Context, req driver.Request, ar acquireReq) (reply, error) {
	for {
		done := make(chan struct{})
		var rep reply
		var err error
		go func() {
			defer close(done)
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
			defer cancel()
			rep, err = d.acquireUpdate(cctx, req.Name, ar)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			d.leaveQueue(req, done)
			return reply{}, ctx.Err()
		}
		if err == nil {
			return rep, nil
		}
		// The outcome is unknown: we may be queued or even hold it. A
		// waiter whose server answers met a slow workflow (see the wait
		// loop of fairAcquire), and asks again: an acquire by an owner
		// already queued or holding is answered with its place or its
		// grant.
		if !req.Wait || !d.reachable(ctx) {
			d.leaveQueue(req, nil)
			return reply{}, unavailable(ctx, "acquire "+strconv.Quote(req.Name), err)
		}
		if !d.pauseQueued(ctx, req, unreachablePause) {
			return reply{}, ctx.Err()
		}
	}
}

// healthTimeout bounds reachable's health check.
const healthTimeout = 5 * time.Second

// reachable reports whether the Temporal frontend answers a health check
// (which involves no workflow and no worker) before ctx ends or
// healthTimeout passes. It tells a slow answer, which a waiter waits out,
// from an unreachable server.
func (d *Driver) reachable(ctx context.Context) bool {
	hctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	_, err := d.c.CheckHealth(hctx, &client.CheckHealthRequest{})
	return err == nil
}

// leaveQueue removes req.Owner from the queue, or releases its grant, and
// returns once that is done: a cancelled Lock returns with the queue clean
// even if its process exits right after (a CLI that timed out). When after
// is not nil, the release is sent once it is closed (the request in flight
// has reached the workflow, so the release is handled after it).
//
// The release is a signal, not an update: it takes none of the workflow's
// update slots (Temporal admits a limited number of updates in flight, see
// longPolls), so that many waiters leaving at once (a whole pool of
// workers shutting down) crowd out neither each other nor the holder's
// release. Once the server has the signal, it is in the workflow's
// history, and handled after every request that reached the workflow
// before it, whether or not a worker runs at this moment.
//
// It takes leaveBound(req.TTL) at most. If the bound passes first (the
// server does not answer), the entry is left to expire: a client waiter
// renews its place with every request and is dropped a TTL after its last
// one, and a grant it got meanwhile ends by its lease's timer a TTL after
// the grant.
func (d *Driver) leaveQueue(req driver.Request, after <-chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), leaveBound(req.TTL))
	defer cancel()
	if after != nil {
		select {
		case <-after:
		case <-ctx.Done():
			return
		}
	}
	_ = d.c.SignalWorkflow(ctx, d.workflowID(req.Name), "", sigRelease, ownerReq{Owner: req.Owner})
}

// leaveTimeout is the most a cancelled waiter spends leaving the queue
// (see leaveBound).
const leaveTimeout = 5 * time.Second

// leaveBound bounds leaveQueue: leaveTimeout, room for the request in
// flight to reach the workflow when its workflow task went to a worker
// that vanished and is run again elsewhere after workflowTaskTimeout; but
// no more than the TTL, after which the entry
// left behind has expired (or will with the lease it was granted), so
// that waiting longer would only delay the caller.
func leaveBound(ttl time.Duration) time.Duration {
	return min(leaveTimeout, ttl)
}

func (d *Driver) acquireUpdate(ctx context.Context, name string, ar acquireReq) (reply, error) {
	start := d.c.NewWithStartWorkflowOperation(mutexStart(d.workflowID(name), d.cfg.taskQueue),
		mutexWorkflowName, mutexState{Name: name, HistoryLimit: d.cfg.historyLimit})
	h, err := d.c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName:   updAcquire,
			Args:         []any{ar},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	var rep reply
	if err == nil {
		err = h.Get(ctx, &rep)
	}
	return rep, err
}

// mutexStart is how a request starts the mutex workflow id if it is not
// running.
func mutexStart(id, taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowTaskTimeout:      workflowTaskTimeout,
	}
}

// queueBySignal sends a Lock's acquire as a signal (with start), for a
// name whose queue the workflow's replies to this driver lately counted
// crowded (see contention), and reports the waiter queued: it then learns
// its place by query (pollPlace) and takes a grant with a "wait", as a
// waiter far back in the queue does.
//
// An update would answer in one round trip, but Temporal admits a few
// updates in flight per workflow (history.maxInFlightUpdates, 10 by
// default), and an update it turns away for that limit also aborts every
// other update in flight on the workflow (see "Many waiters" in the
// package doc). A signal takes no such slot. So many processes that
// return to a contended name at once (every worker of a pool after the
// holder's release, a pool's next round) queue without turning each other
// away. A Lock that finds the lock free this way pays two more round trips
// (the query and the wait); its grant, finding nobody waiting, ends the
// name's crowded mark.
//
// If the signal fails, the acquire is sent as an update
// (acquireDetached). A mutex workflow of an older version of this package
// ignores the signal; the place query then answers gone, the wait does
// too, and the waiter queues by update.
func (d *Driver) queueBySignal(ctx context.Context, req driver.Request, ar acquireReq) (reply, error) {
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
		defer cancel()
		id := d.workflowID(req.Name)
		_, err = d.c.SignalWithStartWorkflow(cctx, id, sigAcquire, ar, mutexStart(id, d.cfg.taskQueue),
			mutexWorkflowName, mutexState{Name: req.Name, HistoryLimit: d.cfg.historyLimit})
	}()
	select {
	case <-done:
	case <-ctx.Done():
		d.leaveQueue(req, done)
		return reply{}, ctx.Err()
	}
	if err != nil {
		return d.acquireDetached(ctx, req, ar)
	}
	return reply{Status: stQueued, RetryAfter: time.Millisecond, Query: true}, nil
}

// contention remembers the names on which, lately, the mutex workflow's
// replies to this driver's Locks counted many waiters (see
// queueBySignal).
type contention struct {
	mu   sync.Mutex
	seen map[string]time.Time // when a reply last counted many
}

// crowded is how many client waiters queued make a name's next Lock
// queue by signal: more than hold a wait open or poll by update (up to
// queryFrom), so that some poll by query. Past that, the waiters' own
// updates (longPolls waits held open, the polls by update just behind)
// leave few of the server's default 10 slots to arrivals, and as many
// processes as wait can arrive at once (a pool's next round). Below it,
// the update's one round trip is worth more: with 8 processes on one
// name (7 waiting) no update was refused, and queueing by signal served
// about a sixth fewer hand-offs (50 against 59 a 2s round).
const crowded = queryFrom + 1

// contendedFor is how long a name counts as crowded after a reply last
// said so, unless a grant finds nobody waiting before.
const contendedFor = 5 * time.Minute

// note records what a reply for name said of its queue: waiting client
// waiters; granted, whether it granted the lock.
func (c *contention) note(name string, waiting int, granted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if granted && waiting == 0 {
		delete(c.seen, name) // quiet now
		return
	}
	if waiting < crowded {
		return
	}
	now := time.Now()
	if c.seen == nil {
		c.seen = map[string]time.Time{}
	}
	if len(c.seen) >= 1024 {
		for n, t := range c.seen {
			if now.Sub(t) > contendedFor {
				delete(c.seen, n)
			}
		}
	}
	c.seen[name] = now
}

// recent reports whether a reply for name lately counted many waiters.
func (c *contention) recent(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.seen[name]
	return ok && time.Since(t) <= contendedFor
}

// waitUpdate sends one "wait" and closes accepted once the workflow has
// taken it (or the call failed).
func (d *Driver) waitUpdate(ctx context.Context, name, owner string, accepted chan<- struct{}) (reply, error) {
	h, err := d.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   d.workflowID(name),
		UpdateName:   updWait,
		Args:         []any{ownerReq{Owner: owner, Poll: true}},
		WaitForStage: client.WorkflowUpdateStageAccepted,
	})
	close(accepted)
	var rep reply
	if err == nil {
		err = h.Get(ctx, &rep)
	}
	if err != nil && isNotFound(err) {
		return reply{Status: stGone}, nil
	}
	return rep, err
}

// Inspect implements driver.Driver.
func (d *Driver) Inspect(ctx context.Context, name string) (driver.Info, error) {
	if d.cfg.mode == ModeID {
		return (*idLocker)(d).inspect(ctx, name)
	}
	var s mutexState
	found, err := d.query(ctx, d.workflowID(name), "", &s)
	if err != nil || !found {
		return driver.Info{Name: name}, err
	}
	return s.info(), nil
}

// info is what Inspect reports of s. Every holder is listed in Permits
// when one of them is counted (a semaphore's permit, a reader); a mutex's
// holder, or a read-write lock's writer, has none.
func (s mutexState) info() driver.Info {
	in := driver.Info{Name: s.Name}
	if h := s.Holder; h != nil {
		in.Held, in.Token, in.Holder = true, h.Token, h.Holder
		in.ExpiresIn = max(time.Until(h.Expires), 0)
		all := append([]entry{*h}, s.More...)
		if slices.ContainsFunc(all, counted) {
			for _, e := range all {
				in.Permits = append(in.Permits, driver.Permit{Token: e.Token, Holder: e.Holder, ExpiresIn: max(time.Until(e.Expires), 0)})
			}
		}
	}
	for _, e := range s.Queue {
		in.Waiters = append(in.Waiters, e.Holder)
	}
	return in
}

// query runs the "state" query; found is false when no such workflow runs.
func (d *Driver) query(ctx context.Context, id, runID string, out any) (found bool, err error) {
	v, err := d.queryRetrying(ctx, id, runID, qryState)
	if err != nil {
		if isNotFound(err) {
			return false, nil
		}
		return false, unavailable(ctx, "query "+id, err)
	}
	if err := v.Get(out); err != nil {
		return false, fmt.Errorf("%w: temporal query %s: %w", driver.ErrUnavailable, id, err)
	}
	return true, nil
}

// How often a query is asked again while no answer has come (the gap
// doubles from queryHedge up to queryHedgeMax), how many are asked at
// most, and the longest a query is waited for when ctx has no deadline.
const (
	queryHedge    = 250 * time.Millisecond
	queryHedgeMax = 500 * time.Millisecond
	queryAsks     = 40
	queryFor      = callTimeout
)

// queryRetrying runs a query and, while no answer has come, asks it again
// (hedges) at growing gaps, keeping the earlier asks open; the first
// answer wins and ends the others. It waits while ctx lives, for at most
// queryFor if ctx has no deadline.
//
// A query goes to a worker through a poll the worker left open on the
// server. A worker that stopped (its process paused, or cut off) still
// has its polls open there, and a query handed to one of them is never
// answered; that poll is then spent, and the next ask goes to another.
// So asking again gets past the dead polls, one per ask, while an answer
// that is merely slow (a worker replaying a long history on a busy
// machine) is still taken when it comes: no ask is cancelled to make room
// for the next, as a retry would.
func (d *Driver) queryRetrying(ctx context.Context, id, runID, query string, args ...any) (converter.EncodedValue, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, queryFor)
		defer cancel()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the asks still open
	type answer struct {
		v   converter.EncodedValue
		err error
	}
	answers := make(chan answer, queryAsks)
	ask := func() {
		go func() {
			v, err := d.c.QueryWorkflow(ctx, id, runID, query, args...)
			answers <- answer{v, err}
		}()
	}
	ask()
	asked, open := 1, 1
	gap := queryHedge
	hedge := time.NewTimer(gap)
	defer hedge.Stop()
	for {
		select {
		case a := <-answers:
			open--
			// An error before ctx ends is the server's answer (not
			// found, unreachable): taken as it is. Once ctx has ended,
			// every open ask fails with it; the last one reports.
			if ctx.Err() == nil || open == 0 {
				return a.v, a.err
			}
		case <-hedge.C:
			if asked < queryAsks {
				ask()
				asked++
				open++
				gap = min(2*gap, queryHedgeMax)
				hedge.Reset(gap)
			}
		}
	}
}

// List implements driver.Driver. It lists the running lock workflows of
// the driver's mode and task queue through Temporal's visibility store
// (which may lag a moment behind) and queries each.
func (d *Driver) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	wfType := mutexWorkflowName
	if d.cfg.mode == ModeID {
		wfType = idLockWorkflowName
	}
	query := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running' AND TaskQueue = '%s'",
		wfType, strings.ReplaceAll(d.cfg.taskQueue, "'", "''"))
	var out []driver.Info
	var page []byte
	for {
		resp, err := d.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: page})
		if err != nil {
			return nil, unavailable(ctx, "list", err)
		}
		for _, e := range resp.Executions {
			var in driver.Info
			var found bool
			if d.cfg.mode == ModeID {
				in, found, err = (*idLocker)(d).inspectRun(ctx, e.Execution.WorkflowId, e.Execution.RunId)
			} else {
				var s mutexState
				found, err = d.query(ctx, e.Execution.WorkflowId, "", &s)
				in = s.info()
			}
			if err != nil {
				return nil, err
			}
			if found && strings.HasPrefix(in.Name, prefix) && (in.Held || len(in.Waiters) > 0) {
				out = append(out, in)
			}
		}
		if page = resp.NextPageToken; len(page) == 0 {
			return out, nil
		}
	}
}
