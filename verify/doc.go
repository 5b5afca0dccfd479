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
// # Faults
//
// None; Pause (a lock holder frozen with SIGSTOP past its TTL, as in a long
// GC pause); Kill (a holder killed with SIGKILL and replaced); Net (a
// holder's traffic frozen through its own in-harness proxy for longer than
// the TTL, or its connections dropped and delayed); Restart (every server
// killed and started again on its data); Member (one member of a
// three-node deployment stopped and started again). Each fault is injected
// again and again, each time ending with a heal; the end of a run is left
// quiet so that recovery after the last heal can be seen. dlock verify
// applies only the faults a client can inject on its own side (Pause,
// Kill, Net).
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
//  3. exclusion under faults: every overlap of two holds is explained — one
//     holder's lease was lost (usually the older one's; a grant can also be
//     lost on arrival) and it learnt so (Done closed) or it was killed, its
//     release did not report success, and none of its writes was accepted
//     after the register accepted a write of the other holder.
//  4. recovery: after each heal, the next grant comes within TTL plus the
//     stated bound (Config.Bound, 5s by default: a loaded machine's
//     reconnect and scheduling delays; the recovery column shows what was
//     measured).
//
// A hold is the interval from the acquire's completion to the first of:
// the release call, the moment the client learnt of the loss, its kill,
// the end of the history. The server granted the lock before the acquire
// returned and freed it after the release was called, so this interval lies
// inside the true one, and two such intervals that intersect certainly
// overlapped. Timestamps are only compared as orderings, with this
// conservative reading; no check asserts that something took less than a
// given time, except recovery with its generous bound.
//
// # Verdicts
//
// PASS means that no property was violated in this history: evidence, not
// proof — a short run sees few fault timings. FAIL lists each violation
// with the holds, tokens and register decisions involved. A run that
// granted nothing fails (progress). Notes record what breaks nothing but is
// worth reading: an inconclusive linearizability check (timeout), a
// recovery not judged because the history ended, tokens that restarted
// after a server restart on a backend that does not promise durable fencing.
//
// # Reading a history
//
// history.jsonl holds one Event per line, in time order: the clients'
// operations (proc "c<slot>.<incarnation>": a killed client's replacement
// is the next incarnation), the register's decisions (proc "register",
// op "decide", ordered by seq) and the harness's faults (proc "nemesis":
// spawn, fault, heal, kill). An operation is an "invoke" event followed by
// its completion ("ok", "refused" or "fail") with the same proc and id;
// every event of one lease has the same proc and hold. Written values are
// "<proc>/<hold>/<n>", so a decision names the write it decided. To follow
// one incident, filter by the proc of a fault's target and the holds
// around it:
//
//	grep -E '"proc":"(c2.0|register|nemesis)"' history.jsonl
//
// Time is the wall clock of the one machine every process of the run
// shares; all processes read the same kernel clock.
package verify
