// Package temporallock keeps dlock's locks in Temporal workflows.
//
//	import _ "github.com/dlock/dlock/backend/temporallock"
//	c, err := dlock.Open(ctx, "temporal://127.0.0.1:7233/default")
//
// or, with a Temporal client of your own, d, err := temporallock.New(tc)
// and dlock.New(d).
//
// # Fair mode (mode=fair, the default)
//
// Each lock name has one mutex workflow (MutexWorkflow) that holds the
// lock's whole state: the holder and its lease (or the holders of a
// semaphore's permits or of a read-write lock, see below), a FIFO queue
// of waiters, and the fencing-token counter. A client asks for the lock with
// update-with-start — the workflow is started if it is not running — and
// gets a synchronous answer: granted (with a token), busy (TryLock), or
// queued. A queued waiter then sends "wait" updates; each is held open by
// the workflow until the waiter is granted the lock (it returns at once
// then), or for a wait slice at most — a third of the TTL, between 1s and
// 20s, and never more than half the TTL — after which the waiter asks
// again. A long-poll update rather than a signal back was chosen because
// a client process is not a workflow and cannot receive signals, and
// because it doubles as the waiter's heartbeat: a waiter that stops asking
// (it crashed) is dropped from the queue within its TTL. A Lock whose
// context ends sends a "release" signal, which removes it from the queue
// (or gives back a grant that raced the cancellation), once its last
// request reached the workflow, and returns only when the server has the
// signal: it is then in the workflow's history, handled after that
// request, so the Lock leaves nothing behind, even if its process exits
// right after (a CLI that timed out). A signal rather than an update: it
// takes none of the workflow's update slots (see "Many waiters" below), so
// many waiters that leave at once neither crowd each other out nor delay
// the holder's release (testManyCancelledWaiters). This cleanup is
// bounded by the TTL or 5s, whichever is shorter (room for the request in
// flight to reach the workflow when its task went to a worker that
// vanished and runs again elsewhere; waiting past the TTL would buy
// nothing, see next). If the bound passes (the server or every worker is
// out of reach), Lock returns anyway and the entry is left to expire: the
// waiter no longer renews its place, so it is dropped a TTL after its last
// request, and a grant it got before that ends by its lease's timer a TTL
// after the grant.
//
// A slow answer is not an unreachable server. When a request fails or
// gets no answer in time, the waiter asks the frontend for its health (a
// call that needs no workflow and no worker): if the server answers, the
// workflow is only slow — its task sat with a worker that stopped, or no
// worker runs at all — and the waiter asks again, for as long as its
// context lets it (testWaiterOutlivesSlowAnswers); if not, the server is
// unreachable, and after 90s without an answer Lock fails with
// dlock.ErrUnavailable. (No test waits the 90s; a frozen server is tested
// with a shorter context, whose end ends the Lock: dlocktest's
// FrozenBackendNeverHangsACall.)
//
// Leases: the workflow ends a lease with a timer at its end, grants the
// lock to the next waiter, and refuses the old holder's later renewals
// ("extend" update), so the old holder learns it lost the lock at its next
// renewal. Release and Break are updates too; Inspect is a query. A waiter
// dates its lease from the send time of the wait that brought the grant,
// corrected by the server-measured time the wait was held open and the
// grant's age, so its deadline never falls after the workflow's timer;
// if that answer arrived too late to leave a useful lease (the wait sat in
// the server while no worker ran), it renews once before returning.
//
// Fencing: the token is a counter in the workflow's state, incremented on
// every grant. It is durable (it is in the workflow's history, which the
// server persists) and survives server restarts and worker crashes. The
// first run starts it at its start time in microseconds, so even if an
// operator terminates a mutex workflow, the next one starts above every
// token the old one granted (TestTerminatedMutexWorkflowNextTokenIsHigher).
// DurableFencing is true.
//
// History: the workflow continues as new after 3000 history events (or
// when the server suggests it), carrying holder, queue and counter;
// waiters' open "wait" updates return before it does and are re-sent to
// the new run. An idle mutex workflow has no timer and costs only its
// stored state; it keeps running so that its counter is kept.
//
// Many waiters: Temporal admits a limited number of updates in flight on
// one workflow (history.maxInFlightUpdates, 10 by default), and a wait held
// open is one. Going past the limit costs more than the refused update:
// the history service releases the workflow with the refusal's error,
// which drops its cached state, and with it the workflow task in flight
// (its worker is told "Workflow task not found") and the updates in
// flight: each fails as "workflow update was aborted", and the SDK sends
// them all again some 400ms later, together. So it is in the
// server dlock is tested on (1.29.1) and in Temporal's main branch as of
// this writing: service/history/api/update_workflow_util.go (an update)
// and multioperation/api.go (an update-with-start) release the workflow
// with the error, and workflow/cache/cache.go clears its context on any
// error. So dlock keeps its own updates few and below the limit. Only
// the first four client waiters in the queue hold their waits open. A
// waiter behind them gets an immediate "queued" with a time to ask again:
// about when the grants ahead of it should be done, at least 250ms and at
// most a wait slice (see above). A grant is expected to take the recent
// turnover (hold plus hand-over; the time the name sat free is left out,
// so a queue that forms after a pause polls as the last one did:
// TestTurnoverLeavesFreeTimeOut), or, once the present holder has held the
// lock over a second and over four times that, as long as it has held, so
// a queue behind a long hold asks seldom: 24 waiters behind a holder of 2s
// ask fewer than 5 times a second. The next three waiters ask by update
// (one that finds its waiter among the first four is held open at once);
// the waiters farther back ask by a "place" query, which takes no update
// slot and adds nothing to the history (a query the server refuses, as it
// does when one is already waiting for the workflow task in flight, drops
// nothing: the query handler releases the workflow without an error), and
// send a wait only when the query says they are near the front, or once a
// wait slice to renew their place. A steady queue of any length thus keeps
// at most four waits and three polls in flight, leaving room for the
// holder's release and renewals and for arrivals (testManyWaiters: 24
// waiters arriving one after another, no update refused or aborted).
//
// Arrivals are bounded only where the process has seen the queue. A
// Lock's first request is an update, the one round trip that grants a
// free lock. More Locks of one name sent at the same instant than the
// workflow has free slots (ten, less the waits held open) pass the limit,
// and each refusal aborts the others in flight, which are retried
// together and collide again. So every reply to a Lock's acquire or wait
// tells how many client waiters are queued, and a process whose reply
// counted eight or more (more than hold a wait open or poll by update)
// sends its next Lock of that name as a signal instead: the workflow
// queues it, and the waiter learns its place by the "place" query and
// takes its grant with a wait, as a waiter far back does. A signal takes
// no update slot. The name counts as crowded for five minutes after such
// a reply, until a grant finds nobody waiting. Such a Lock is granted in
// turn with a higher token, sends no update to queue, and leaves the
// queue when cancelled (testCrowdedNameQueuesBySignal). With eight
// processes on a name (seven waiting) the update is kept: it was measured
// faster there, with no update refused. A mutex workflow of an older
// version of this package ignores such a signal; the waiter then finds
// itself not queued and queues by update
// (testCrowdedLockOnOlderWorkflow), and the workflow's replies, which
// count no waiters, keep the process on updates.
//
// A process that arrives knowing nothing of the name (a cron job's new
// process) still sends an update. The lock is never granted twice and
// every Lock is served, but a first burst is slow (testBurstOfArrivals:
// three bursts of the same 32 processes, all served, none overlapping; the
// later bursts send at most a quarter of their Locks as updates; in one
// run they sent 2 each, with no update refused or aborted, against 53
// acquire updates, 24 of them or of the waits refused or aborted, in the
// first). If many new processes
// may ask for one name at the same moment (cron jobs on many hosts at the
// top of the minute), raise history.maxInFlightUpdates on the server above
// the number of those processes plus ten. BenchmarkBurst sends bursts of
// 32 from the same 32 processes to a server with either limit. Six
// bursts each, in two runs: 1.9s and 1.7s a burst on the default limit
// (0.8 updates refused or aborted a burst; 45 acquire updates for the 192
// Locks, most in the first burst), 1.7s and 1.6s with
// history.maxInFlightUpdates=64 (none refused). Before Locks queued by
// signal, the same benchmark took 4.7s a burst on the default limit (41
// refused or aborted a burst) and 1.4s with 64: the signal, the query
// and the wait cost a waiter more round trips than one update, which
// shows where no update is refused.
//
// # Semaphores and read-write locks (fair mode)
//
// A name's mutex workflow holds a semaphore of n permits
// (dlock.Semaphore) or a read-write lock (dlock.RWMutex) with the same
// queue: its holders, in grant order, then its waiters, in arrival order,
// and the rule etcdlock and zklock apply to their queues
// (driver.QueueHolders), read from each request's holder metadata: an
// entry holds when every one ahead of it holds and its own request admits
// it beside them — a permit while fewer than its own n are ahead, a reader
// while no writer is. Whenever a holder goes (release, expiry, Break) or a
// waiter leaves the queue, the waiters at its head that hold now are
// granted, in order, each with the next token, so tokens of one name
// increase in grant order across permits, readers and writers
// (dlocktest's SemaphoreAdmitsAtMostNHolders, the RWMutex cases). Grants
// never pass a waiter: a request with a higher n waits behind one with a
// lower n, so the lower n is never exceeded
// (SemaphoreDisagreeingLimitsNeverExceedTheLowerOne), and a reader waits
// behind a waiting writer (RWMutexTryRLockDoesNotPassAWaitingWriter,
// RWMutexWriterIsNotStarvedByReaders); when such a waiter gives up, the
// ones behind it that hold now are granted at once
// (testLeavingWaiterLetsOthersIn checks both halves).
//
// Each permit is a lease of its own: its renewal and release name its
// owner and act on it alone (testPermitsAreOwnerChecked); one that is not
// renewed ends by its own timer while the others are kept
// (testLaterPermitExpiresAlone, SemaphoreCrashedHolderFreesPermitWithinTTL).
// Break ends every one (SemaphoreBreakFreesEveryPermit). Inspect and List
// report every holder in Info.Permits when one of them is a permit or a
// reader (SemaphoreInspectShowsEveryPermit,
// RWMutexInspectShowsEveryReader). Lock, the workflow-side API, takes
// mutexes only.
//
// Granting several holders at once is a change of the workflow's code,
// versioned under the change ID "counted-leases": a history recorded by a
// version of this package that kept one holder per name replays as it
// ran, a counted request queued behind the holder, and one recorded since
// replays with the counted grants it made
// (TestReplayRecordedHistories replays both; testCountedGrantReplays
// records the second).
//
// # Id mode (mode=id)
//
// The lock is a workflow run whose ID is derived from the name
// (IDLockWorkflow): a client holds the lock while its run is running.
// Acquire starts the run with ID-conflict policy FAIL (the start fails
// while another run with the ID is running: this is what excludes),
// reuse policy ALLOW_DUPLICATE (a closed run does not block the name;
// REJECT_DUPLICATE would lock it out until the run left retention) and
// WorkflowExecutionErrorWhenAlreadyStarted (without it the Go SDK returns
// the running workflow's run instead of an error, and a naive lock would
// believe it acquired). A busy lock is dlock.ErrNotAcquired; an attempt
// the server does not answer within the attempt's bound is
// dlock.ErrUnavailable, not a deadline of the caller's. The run holds
// the lease with a workflow timer, renewed by an "extend" update; when the
// timer fires the run ends and the name is free. Release terminates the
// lease's own run (named by its first run ID, so it can never end a later
// holder's run, and needing no worker); Break terminates whatever runs.
// A long-held lease continues as new to bound its history; requests name
// the chain's first run, so they follow it. There is no queue: Lock
// retries, woken by a long poll on the running run's close event (no
// fixed-interval polling while the lock is held), so waiting is not fair
// and WithFair is refused; Grant.Recovered is not reported (LockDelay
// false: the lock-delay option then always applies). One run is one
// holder: id mode has no semaphores and no read-write locks, and says so
// in its Capabilities, so dlock returns ErrUnsupported for them
// (dlocktest's SemaphoreIsUnsupportedAndSaysSo and
// RWMutexIsUnsupportedAndSaysSo).
//
// Fencing in id mode: the token is the lock run's start time in
// microseconds, by the Temporal server's clock, read by the client with a
// describe call after the start. Runs of one ID never overlap (FAIL), so
// a run starts after the previous one closed, and its token is higher as
// long as the server's clock does not step back across the hand-over.
// Tokens are durable (they are the runs' recorded start times). This is
// weaker than fair mode's counter, which needs no clock at all.
//
// # Workers
//
// Lease expiry and hand-over are workflow code, so a worker must run the
// lock workflows. By default every driver runs its own worker on the task
// queue "dlock" (a queue of its own, so that the lock workflows never land
// on a worker of the application that lacks them): with every client
// process a worker, the locks keep working as long as any client runs. A
// service that runs its own workers may pass WithoutWorker (URL
// worker=false) and call RegisterWorkflows on a worker that polls the same
// task queue. All workers of the queue must run the same version of this
// package (workflow code must be deterministic across workers).
//
// What a held lock keeps in a client process is in its worker, not in the
// driver: the driver runs no goroutine and no timer per lock (a lease's
// end is the mutex workflow's timer, in the server), but the Temporal SDK
// keeps every workflow its worker ran in its workflow cache (10,000 per
// process by default; worker.SetStickyWorkflowCacheSize), so that the
// workflow's next task need not replay its history. A cached workflow is
// the SDK's state for it (its execution context, history event handler
// and registered handlers: the heap per held lock of bench/RESULTS.md,
// scenario C) and one goroutine per coroutine of the workflow. The mutex
// workflow has one, its main loop, which also receives the workflow-side
// API's signals, so a held lock keeps one goroutine in the worker that
// last ran its workflow (testHeldLockKeepsOneGoroutine). Purged from the
// cache, the workflows leave a held lock's own cost in its client: about
// 300 B and no goroutine (scenario C measures both; bench/README.md).
// Runs started by versions of this package that received the signals in
// a coroutine of their own keep doing so until they continue as new
// (change ID "signals-in-main-loop"; TestReplayRecordedHistories replays
// both).
//
// A worker crash loses nothing: the workflows' state is in the server, and
// another worker (any other client) picks up their tasks. With no worker
// at all, nothing expires and nobody is granted until one comes back.
//
// A client process that is stopped (SIGSTOP, a debugger) or cut off
// without its connections closing is worse than a dead one for a while:
// the server still holds the polls its worker left open, and hands each
// of them a task that is then never answered. A workflow task so taken
// (a lease's end, a hand-over, a waiter's request) is run by another
// worker after the workflow task timeout, 3s; a query so taken is never
// answered, and each stopped worker leaves up to two such polls. So a
// query (Inspect, List) is asked again while no answer has come, every
// 250ms and then every 500ms, keeping the earlier asks open, for as long
// as the caller's context lives (30s at most if it has no deadline): each
// ask spends one dead poll, and one finds a worker that runs
// (PausedWorkersDoNotStallInspect: three paused holder processes, every
// lock inspected within 30s; usually 2–4s for the first under a load
// average of 5, but once more than 10s in a CI run, so the CLI's default
// --timeout of 10s may not be enough for the first Inspect after a holder
// process stopped). So a paused process holds no lock hostage: its own lease ends by
// timer, and the next waiter is granted a few seconds after that (about 4s
// on a test machine, with a 2s lease). A shorter workflow task timeout
// would shorten this, but a task that takes longer than the timeout (the
// replay of a long history on a busy machine) would then time out again
// on every attempt and never complete.
//
// # Locks from inside workflows
//
// Lock (with Unlock on the lease it returns) takes a fair-mode lock from a
// workflow, waiting in the same queue as clients; see its doc. A waiting
// workflow cannot renew its place by asking again as a client does, and
// should not have to: a workflow waits durably, and may go on waiting
// after its workers were away for a while. What makes its place stale is
// only that its run closed. So the mutex workflow probes each workflow
// waiter by a signal once a TTL: a signal to a run that has closed
// (completed, failed, timed out, terminated) fails, and the waiter leaves
// the queue then, within a TTL. A grant to a run that has closed is given
// back at once for the same reason.
//
// # Guarantees
//
// Clocks: lease ends are timers of the Temporal server; the client's lease
// deadline is measured on its own monotonic clock from the send time of
// its last confirmed request, so only clock rates must be close. Crash of a
// client: its lease ends by timer within its TTL; a queued waiter is dropped
// within its TTL; a waiting workflow that closed is dropped within its TTL. Partition: a cut-off client cannot renew and sees its
// lease end before the server's timer does. Server restart: all state is
// in the server's persistence; leases, queues and tokens survive, and
// clients and workers reconnect (a lease whose renewals failed for its
// whole TTL during the restart is lost).
//
// # URL
//
//	temporal://[:API_KEY@]host:port/namespace?param=value&...
//
// host:port is the frontend (default 127.0.0.1:7233), namespace defaults
// to "default". The API key, if any, goes in the password place of the
// URL (so it is never printed) or in an environment variable named by
// api_key_env; it turns TLS on. The parameters — mode (fair or id, default
// fair), task_queue (default dlock), worker (false: run no worker in this
// client), api_key_env, tls (on with any TLS parameter or an API key) and
// the TLS parameters ca, cert, key, server_name, skip_verify — are
// described in the README's table of URL parameters:
// https://github.com/dlock/dlock#url-parameters.
//
// # Names
//
// Any dlock name maps to a workflow ID of its own: escaped one-to-one, or,
// if the escaped form is longer than 200 bytes, hashed (distinct for
// practical purposes); see WorkflowID.
package temporallock
