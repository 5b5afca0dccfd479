// Package verify checks dlock's guarantees the way Jepsen checks a
// database: it runs a workload of many client processes against a backend,
// injects faults, records every operation in a history, and then checks
// the history for the properties a lock with leases and fencing tokens
// promises. It runs in dlock's own tests against every backend
// (TestVerifyShortProfile, "make verify") and against a user's deployment
// ("dlock verify --backend URL").
//
// # The workload
//
// Each client process loops: acquire the lock (Mutex.Lock) → write its
// token to the fenced register → read the register → hold the lock a random
// short time, watching Lease.Done → write again → release. The second write
// is made even when the lease was lost meanwhile: it is a stale write, and
// the fence must refuse it if a newer holder has written.
//
// When the harness aims a fault at a client (pause, kill, net), it asks the
// register to mark the next hold to begin; that client then holds a little
// longer than the fault lasts (or until its lease is lost), so the fault
// always lands on a lock holder mid-hold.
//
// The fenced register is the protected resource. It runs in the harness
// process on a loopback port and accepts a write only if its token is at
// least the highest token it accepted; it records each decision in order.
//
// # Workloads
//
// The loop above is the mutex's (WorkloadMutex). The primitives beside it
// run the same loop through their own API, and are checked by the same
// checkers (Config.Workload; dlock verify --workload):
//
//   - WorkloadFairMutex: the mutex with dlock.WithFair, on the backends
//     where that is another path than the default mutex (Redis,
//     PostgreSQL, MySQL/MariaDB: a queue whose release hands the lock to
//     the next waiter). The checks are the mutex's, word for word.
//   - WorkloadElection: Election.Campaign, with the client's name as its
//     value, and Resign. A leadership is a lease whose token is the term:
//     the checks are the mutex's, word for word. Every candidate also
//     watches the leadership with Election.Observe and records each leader
//     reported; the observe check then asks that each observer's terms
//     never go back, that a term is reported with the value of the client
//     it was granted to, and not before that client asked for it.
//   - WorkloadSemaphore: Client.Semaphore(name, Config.Limit) (3 by
//     default; the test profile runs 5 clients). Its holders share the
//     name, each with its own token, so they do not write the fenced
//     register (it would refuse every holder's write but the highest
//     token's): each hold reads it once, which is also the moment the
//     fault injector may aim at the hold. Exclusion becomes counting: a
//     grant made while as many holds of the name as its limit were still
//     claimed breaks the limit, unless enough of them had lost their
//     permits in a way the contract allows (the excuses below, judged
//     between each of them and the new grant).
//   - WorkloadRWMutex: Client.RWMutex; two holds in three are a reader's
//     (RLock), the third a writer's (Lock). Writers write the fenced
//     register as the mutex does; readers only read it. Two readers may
//     overlap; any overlap with a writer is judged as the mutex's.
//
// The table's "most held" column is the most holds of one name claimed at
// once: 1 for a mutex or an election without overlaps, up to the limit
// for a semaphore, the readers together for a read-write lock; an excused
// overlap (a paused holder's) shows as one more.
//
// # Faults
//
// None; Pause (a lock holder frozen with SIGSTOP past its TTL, as in a long
// GC pause); Kill (a holder killed with SIGKILL and replaced); Net (a
// holder's traffic frozen through its own in-harness proxy for longer than
// the TTL, or its connections dropped and delayed); Restart (every server
// killed and started again on its data); Member (one member of a
// three-node deployment stopped and started again); Skew (client clocks
// that are wrong, below); MemberCut (a follower of a three-member
// ZooKeeper or etcd cluster cut off from the two other members while the
// clients that talk only to it still reach it: the holder among them can
// no longer renew through the leader, which expires its lease and grants
// the lock on the majority's side); Evict (the server's memory filled up
// to its limit while a client holds the lock: under Redis's noeviction the
// writes are refused and the lock is unavailable until the memory is
// freed; under an evicting policy, accepted with allow_eviction=true, the
// held lock may be evicted and granted again); PartitionRestart (one
// Redlock node cut off from every client, then another node restarted,
// then the cut healed: the node that was away has missed grants, the one
// that restarted may have lost its counter); BreakPartition (a holder's
// traffic frozen, as under Net, while the harness breaks its lock with
// Client.Break, as an operator would). Each fault is injected again and
// again, each time ending with a heal; the first waits until the workload
// runs (a client process starts slowly on a loaded machine), and a round
// is injected only if its heal leaves the clients asking for leases for
// TTL + bound + 1s after it, so that recovery after every heal is judged.
// After the last round the run ends early: once a grant has followed the
// last heal (or TTL + bound passed without one, a violation) and two TTLs
// have passed since it — by then every lease the fault could touch has
// been renewed or has expired — the register tells each client, in its
// next reply, to finish its hold and stop. The history records each
// fault's window: a fault event when it begins (for Kill, before the
// signal) and a heal when it ends, with the process it was aimed at, and
// each Break with its invocation and completion. dlock verify applies only
// the faults a client can inject on its own side (Pause, Kill, Net,
// BreakPartition).
//
// # Skewed clocks
//
// A lease is a promise about time made by two clocks: the server expires
// the lock a TTL after its last renewal by its own clock, and the client
// declares the lease lost at the send time of its last confirmed renewal
// plus the TTL minus a drift margin (1% of the TTL + 5ms) by its own
// monotonic clock. The Skew fault runs two of the client processes with
// wrong clocks (internal/clock, set by the worker's clock_rate and
// clock_offset; libfaketime cannot do it, as Go reads the clock through the
// vDSO, not libc), and each round makes one of them hold the lock for
// SkewHold TTLs of real time:
//
//   - c0's clock is an hour ahead (SkewOffset) at the right rate. This
//     changes nothing, and the run shows it (no loss, no overlap, the long
//     holds renewed and released normally): every lease decision in dlock
//     is a difference of two readings of the process's own monotonic
//     clock, and servers are given durations (PX, a session timeout, an
//     interval), never the client's time of day.
//   - c1's clock runs at SkewRate = 0.3 of real time: it believes that 0.3s
//     passed when a second did. Any rate below 1 − 1% − 5ms/TTL (0.9875 for
//     a TTL of 2s) is beyond the drift allowance: when renewals stop, the
//     client believes it holds for (TTL − margin)/rate, after the server
//     has expired it. Below 1/3 — hence 0.3 — the renewals themselves, due
//     every TTL/3 of its clock, come more than a TTL of real time apart, so
//     the lease expires on the server between two renewals with no other
//     fault, and another client is granted the lock. The checker then shows
//     what happens when the clock assumption breaks: overlaps whose loser
//     is the slow-clock process, excused as "skew" and only so — its stale
//     writes must still be refused by the fence and its release must not
//     succeed. The verdict is PASS because of fencing: exclusion in time is
//     lost, and a resource that does not check tokens would have taken both
//     holders' writes.
//
// A fast clock (rate above 1) errs on the safe side: the client gives up
// its lease early. Every backend's lease decisions (the grant's send time,
// Redlock's validity, renewals and the loss deadline) read the one clock
// of package driver, which the fault slows; only the Redis and Redlock
// backends run it, to keep the profile short, as the two whose server
// expiry is a TTL counted from the client's request. The run's notes give, for
// each skewed client, its grants, the leases it lost and noticed, the holds
// that overlapped a newer holder's, and its writes the fence refused.
//
// # What is recorded
//
// Each client records its operations as invocations and completions; the
// moment it learns that a lease is lost, from the Lost hook, before Done
// closes (a loss recorded after the hold's release was called was learnt
// only from the refused release); each grant's and renewal's proven
// deadline (Lease.Expires, on the real clock; "renew" events); and it exits
// with status 3 if it could not write every event. The harness records the
// fault windows, each client's spawn (with its clock rate under Skew) and
// exit status, and the register's decisions. A client that exits with an
// error fails the run (its history may be incomplete), with one exception:
// a client built with -race that exits with the race detector's status (66,
// which the runtime puts only in place of a clean exit's 0) when the log
// holds the detector's reports and none has a frame of dlock's code in
// either access. That exit is a note naming the packages, not a violation.
// A CI run saw this once: under the pause fault, the Temporal SDK's
// workflow cache eviction raced with its own workflow tasks.
//
// # What is checked
//
//  1. linearizable: the register's operations as the clients saw them —
//     writes accepted or refused, reads — are linearizable in the model of
//     a fenced register (checked with porcupine); fence: the register never
//     accepted a token lower than one it had accepted; tokens: a grant's
//     token is greater than that of every grant completed before it was
//     asked for.
//  2. exclusion without faults: no two holds of one name overlap.
//  3. exclusion under faults: an overlap of an older hold A with a newer
//     grant B (B's acquire completed before A stopped claiming) is excused
//     only where the lease contract allows it, and the table says which
//     excuse each overlap had. pause: A's process was paused, B's grant
//     completed after the pause began, and A stopped claiming within a
//     margin (TTL/10, at least 100ms) of the resume. skew: A's process is the one whose clock
//     runs slow. kill: A's process was killed, and B's grant completed
//     after the kill began — a kill explains nothing that came before it.
//     deadline passed: B's grant completed after A's last proven deadline,
//     and A stopped claiming within the margin of that deadline. dead on
//     arrival (B the loser): B's token is lower than A's, B's acquire began
//     before A's completed, and B noticed the loss within TTL/3 plus the
//     margin of its grant. break: an operator's Break of the lock
//     succeeded, B's grant completed after the Break began and A's acquire
//     began before the Break returned (so A's grant may have come first,
//     and the Break taken it: with a semaphore, the Break takes every
//     permit, a holder's that was just granted too), no renewal of A was
//     sent after the Break returned, and A stopped
//     claiming within the margin of its proven deadline — a holder cut off
//     from the backend cannot hear of the Break, and gives up at its
//     deadline. A backend's documented, named Allowance for the fault
//     (Redis without persistence across a restart; Redis with an evicting
//     policy, and Redlock with a node restarted empty, where A must also
//     stop claiming within a third of the TTL of B's grant, at its next
//     renewal) turns the overlap into a printed note, never a silent pass. Everywhere else the overlap
//     is a violation: A noticed the loss after B's grant (Done closed
//     late), learnt it only when its release was refused (never counted as
//     observed), or never; the message says when B was granted before A's
//     proven deadline. No excuse holds if the loser's release reported
//     success or the register accepted a write of the loser after one of
//     the other.
//  4. recovery: after each heal, a grant comes within TTL plus the stated
//     bound (Config.Bound, 5s by default: a loaded machine's reconnect and
//     scheduling delays; the recovery column shows what was measured). A
//     heal with no grant after it is a violation.
//  5. complete: a write the client saw decided has the register's
//     decision; every client process exited with status 0 or was killed by
//     the harness; the harness wrote every event; a fault run injected at
//     least one round. A client never granted a lease is noted.
//  6. observe (election workload): what Election.Observe reported (see
//     Workloads).
//
// A hold is the interval from the acquire's completion to the first of:
// the release call, the moment the client learnt of the loss, its kill,
// the end of the history. The server granted the lock before the acquire
// returned and freed it after the release was called, so this interval lies
// inside the true one, and two such intervals that intersect certainly
// overlapped. Timestamps are compared as orderings, with this conservative
// reading, and with proven deadlines and fault windows allowing the margin
// above for scheduling; no check asserts that something took less than a
// given time, except recovery with its generous bound and the
// dead-on-arrival notice.
//
// # Verdicts
//
// PASS means that no property was violated in this history: evidence, not
// proof — a short run sees few fault timings. FAIL lists each violation
// with the holds, tokens and register decisions involved. A run that
// granted nothing fails (progress). Notes record what breaks nothing but is
// worth reading: an inconclusive linearizability check (timeout), an
// overlap covered by a backend's Allowance, tokens that restarted after a
// server restart on a backend that does not promise durable fencing.
//
// # Reading a history
//
// history.jsonl holds one Event per line, in time order: the clients'
// operations (proc "c<slot>.<incarnation>": a killed client's replacement
// is the next incarnation), the register's decisions (proc "register",
// op "decide", ordered by seq) and the harness's events (proc "nemesis":
// spawn, fault, heal, kill, exit, break). An operation is an "invoke" event
// followed by its completion ("ok", "refused" or "fail") with the same proc
// and id; every event of one lease has the same proc and hold, and its
// "lost" and "renew" events carry no id. Written values are
// "<proc>/<hold>/<n>", so a decision names the write it decided. To follow
// one incident, filter by the proc of a fault's target and the holds
// around it:
//
//	grep -E '"proc":"(c2.0|register|nemesis)"' history.jsonl
//
// Time is the wall clock of the one machine every process of the run
// shares; all processes read the same kernel clock.
package verify
