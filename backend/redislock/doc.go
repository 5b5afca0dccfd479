// Package redislock is dlock's Redis backend: a lease is a key set with a
// TTL by one Lua script, its fencing token taken from a per-name counter,
// and a release hands the lock to the next queued waiter and tells it over
// pub/sub.
//
//	import _ "github.com/dlock/dlock/backend/redislock"
//	c, err := dlock.Open(ctx, "redis://user:pass@localhost:6379/0")
//
// or, with a client you already have (a *redis.Client, a
// *redis.ClusterClient, a failover client):
//
//	d, err := redislock.New(rdb)
//	c := dlock.New(d)
//
// # Mechanism
//
// Acquire is one script in one round trip: it INCRs the name's fence
// counter and SETs the lock key, NX with PX = TTL, its value holding the
// token; if the lock is held it answers the holder's remaining PTTL (the
// number it took is then skipped: tokens need only increase). Extend and
// Release are scripts that act only if the lock still holds the caller's
// owner key (128 random bits). Release deletes the key and serves the
// first queued waiter, if any: a waiter that queues behind a grant marks
// the lock value, so the release of a lock nobody waited for is a GET and
// a DEL and does not read the queue.
//
// Waiting is a FIFO queue in Redis, for plain and fair locks alike: each
// waiter has a place in a list, and the lock is granted only to the first
// live waiter. An attempt is one round trip, and it doubles as the
// waiter's heartbeat. A waiter first in line learns the holder's PTTL and
// tries again when the lease would run out, which no message announces
// (a crashed holder's); a new waiter behind others does not ask for it
// (it is handed the lock in turn), and its heartbeat, which always reads
// the PTTL, is when it looks should the lock still be held with the
// waiters ahead of it gone (TestWaiterBehindOthersTakesOverACrashedHolder).
// A waiter whose heartbeat stops for the waiter TTL
// (killed, cut off) is dropped as soon as it reaches the head of the list,
// and a waiter whose context ends removes itself before Lock returns
// (after the round trip in flight, if any). The difference between the
// modes is arrival: a plain Lock first tries to take the lock outright, as
// an unfair mutex lets an arriving goroutine do, and TryLock takes a free
// lock whoever waits; with dlock.WithFair, an arrival never passes a live
// waiter. The first attempt of a Lock of a name this process has not
// waited for lately does not queue: a free lock costs one round trip and
// no subscription, and only a Lock that finds the lock taken (with
// dlock.WithFair, or anyone queued) subscribes to the name's channel (which then stays subscribed for 30s after its last
// waiter, so that a busy lock's Locks queue in their first attempt). (Waiting by retrying, as driver.AcquireByRetry does, would have
// every process with a waiter try on every release — eight workers, seven
// failed attempts per grant — and the releasing process, trying at once,
// would win most of the time; the queue sends one message to one waiter,
// and hands over in turn.)
//
// A release hands the lock over: the release script itself grants it to
// the first live waiter (new token, the waiter's TTL) and publishes the
// token on that waiter's process channel — one channel per driver, on the
// shared pub/sub connection. PUBLISH returns how many subscribers received
// the message; when that is 0 the waiter's process is gone (its connection
// closed when it died), and the script takes the lock back and serves the
// next waiter — a killed waiter never holds up the queue. The waiter does
// not take the message's word for it: a message can arrive late, after
// the lock was broken and granted to another client, so the waiter first
// reads the lock (a plain GET) and accepts only a value that holds its own
// owner key and the token of the message. Its lease is counted from the
// send time of its last attempt that found the lock held (the hand-off
// came after it, or that attempt would have reported it); if that was
// more than half a TTL ago, the waiter renews the lease with the
// owner-checked extend script instead, and counts from that renewal's
// send time. A contended lock thus changes hands in two round trips (the
// release, the new holder's check) but without the new holder having to
// ask and retry; the check costs one round trip and one command per
// hand-off and closes the window in which a late message made a second
// holder (TestLateHandoffAfterBreakIsNotAccepted). A waiter
// that is frozen (SIGSTOP) or cut off while its connection stays open can
// be handed the lock; the lock then stays taken, unrenewed, for one TTL, as
// a frozen holder's would — unless the waiter has been so for longer than
// the waiter TTL: its entry (a key of its own with the waiter TTL as PX,
// which each attempt sets again) has then expired, and the release skips
// it (TestStalledWaiterPastWaiterTTLIsSkipped). A waiter whose entry is
// live but whose place in the list was lost (a hand-off to it that came to
// nothing, or a list that expired with another process's shorter waiter
// TTL) takes its place again at its next attempt
// (TestWaiterMissingFromTheListIsQueuedAgain). On Redis Cluster, where PUBLISH counts one
// node's subscribers only, there is no hand-off: the release publishes the
// first waiter's owner key on the lock's channel, and that waiter tries.
//
// Waiters are woken only through the queue (TestEveryReleaseWakesTheQueue):
// a release that finds nobody queued publishes nothing
// (TestReleaseWithNobodyQueuedPublishesNothing).
//
// Renewals that come due together go out in batches
// (driver.BatchExtender): the owner-checked extend script of up to 256
// leases in one pipeline, one round trip (one per node of a cluster);
// semaphore permits and readers' leases are renewed one by one
// (BenchmarkRenewals: 5.7× the renewals a second, 20,000 leases; the
// conformance suite's BatchRenewalRenewsEachLeaseAndReportsEachLoss).
//
// # Semaphores
//
// A semaphore (dlock's Semaphore, driver.Request.Limit > 1) keeps its
// permits in two keys of the name beside the mutex's, under the same hash
// tag: a sorted set of owner keys scored by each permit's expiry in ms on
// the server's clock (TIME in the script), and a hash of each owner's
// token and holder metadata. Every permit script first drops the permits
// whose expiry has passed, so an expired permit frees its place at the
// next attempt; both keys expire with the latest permit, so a semaphore
// whose holders all died leaves no keys (TestExpiredPermitLetsWaiterIn).
// A grant is one script in one round trip: it is made while fewer than
// the caller's own limit are held, and its token is the next value of the
// name's fence counter, the mutex's, so tokens increase in grant order
// across all permits and across Break. Extend and Release act on the
// caller's own permit only, and fail with ErrLeaseLost once it has
// expired or been broken; Break frees every permit.
//
// Waiters queue in the name's queue, as a mutex's do, with the same
// heartbeat, and are granted a permit only when first in line (a plain
// Acquire's first attempt and a plain TryAcquire take a free permit
// whoever waits; with dlock.WithFair, nobody passes a live waiter, and
// waiters are granted in arrival order). There is no hand-off: a release
// (or Break, or a waiter that gives up) publishes the first waiter's
// owner key on the name's channel if that waiter may now be granted a
// permit, and the waiter tries; a grant that leaves a permit free wakes
// the next one the same way (TestSemaphoreReleaseWakesWaiters). An expiry
// publishes nothing: a waiter also looks again when the first permit held
// would expire. This works on Redis Cluster too, as each name's keys
// share a slot. Inspect lists every permit in grant order; List finds
// semaphores by their permits keys. compat=setnx has no semaphores
// (Capabilities().Semaphore is false there, and Limit > 1 is
// ErrUnsupported): the other libraries lock a key with one holder. A name
// is either a mutex or a semaphore: the two share the fence counter and
// the queue, but a mutex's lock key and a semaphore's permits do not see
// each other.
//
// # Read-write locks
//
// A reader of a read-write lock (dlock's RWMutex, driver.Request.Shared)
// is a permit, in the same two keys as a semaphore's, and a writer is a
// mutex, in the lock key. While readers hold, the lock key holds the
// readers' mark, a value with no owner key whose PX is as long as the
// latest reader's lease: a writer's scripts, the mutex's, find the lock
// held and read from its PTTL when the last reader's lease runs out. The
// reader scripts set the mark with the first reader and keep its PX with
// every grant, renewal and release (TestRWRenewedReaderKeepsWriterOut);
// the last reader's release deletes it.
// Readers and writers wait in the one queue, with the same heartbeat, and
// take their tokens from the one fence counter, so tokens increase in
// grant order across readers and writers. A reader is granted while no
// writer holds the lock key and nobody live is queued before it, so a
// reader that comes while a writer waits queues behind it, and a steady
// stream of readers cannot starve the writer (dlocktest's RWMutex tests,
// which run on a single server and on Redis Cluster). A reader never
// barges, even when asked without WithFair
// (TestRWReaderNeverPassesAWaitingWriter).
//
// Wake-ups: a writer's release (or Break) wakes the first queued reader by
// its owner key on the name's channel — a reader is never handed the lock
// key, even where releases hand the lock over: it stays first in line, in
// a queue that keeps its TTL (TestRWReaderPutBackAtTheHeadKeepsTheQueueTTL)
// — and each reader's grant
// wakes the reader behind it, up to the first writer; the last reader's
// release wakes the writer first in line, which takes the lock key in its
// own attempt (TestRWReleasesWakeReadersAndWriters, with and without
// hand-offs). A writer that gives up while readers hold wakes the reader
// behind it (TestRWCancelledWriterWakesTheReaderBehindIt); a reader that
// gives up leaves the queue (TestRWCancelledReaderLeavesNothingBehind).
//
// A reader that dies publishes nothing; its permit expires with its TTL,
// and the mark with the latest reader's lease (no later: a release
// shortens it to the readers left), so a waiting writer looks again when
// the mark's PTTL, read at its last attempt, runs out, and is granted then
// (TestRWExpiredReaderDoesNotBlockWriter); its heartbeat reads the PTTL
// again. A reader's lease is valid only
// under the mark: once the mark is gone (expired, broken, evicted, lost
// in a failover) its renewal and release fail with ErrLeaseLost, although
// its permit has not expired (TestRWReaderLosesItsLeaseWithTheMark).
// Break of a lock held by readers ends every reader's lease and serves
// the queue (TestRWBreakFreesEveryReader). Inspect and List show the
// readers as Info.Permits, in grant order. compat=setnx has no read-write
// locks (Capabilities().RWMutex is false there, and Request.Shared is
// ErrUnsupported; TestSetNXHasNoReadWriteLocks).
//
// Keys and names are described in backend/internal/redisscript: every key
// of one lock shares a hash tag made from a hash of the name, so Redis
// Cluster works and any UTF-8 name of up to 1024 bytes is a valid name.
//
// # Guarantees
//
// Clocks: the TTL runs on the Redis server's clock; dlock's client starts
// its own deadline at the send time of a request (or at a reading of its
// clock taken just before it), on its monotonic clock, and needs only that the two clocks run at nearly the same rate (dlock
// allows 1% plus 5ms). A server whose clock jumps forward expires leases
// early; the fencing token is what protects the resource then.
//
// Fencing: tokens come from a counter without TTL, so they keep increasing
// across release, expiry, crash and Break. A hand-off does not INCR it for
// each grant: the first hand-off of a chain reserves a block of 64 numbers
// with one INCRBY and writes the block's last into the value after the
// token ("<token>/<last>"), and each hand-off of that value takes the
// token after it until the block is used up; any other grant takes the
// counter's next value, past the block. Tokens thus still increase
// strictly, and skip the unused rest of a block
// (TestTokensIncreaseAcrossHandoffChains). They survive a restart of Redis
// only if the counter's last increment was persisted: with appendonly yes
// and appendfsync always. With appendfsync everysec up to a second of
// increments can be lost; with RDB snapshots alone, everything since the
// last snapshot; without persistence, the counter restarts at 1 and tokens
// repeat. A failover to a replica also loses the increments not yet
// replicated (replication is asynchronous; WAIT does not make it
// synchronous). So Capabilities().DurableFencing is false unless you
// declare it with WithDurableFencing (URL: durable_fencing=true), which
// Open checks against CONFIG GET where the server allows it (appendonly
// yes, appendfsync always, and no allkeys-* maxmemory-policy, which may
// evict the counters).
//
// Crash of a holder: its lock frees when its TTL runs out (there are no
// sessions). Crash of a waiter: a release skips it at once (its
// process channel has no subscriber any more), and its place is dropped
// after the waiter TTL (WithWaiterTTL, default 2s) in any case. Restart of Redis without
// persistence: every lock is free at once — two holders may then believe
// they hold the lock until the old one's next renewal fails (within a third
// of its TTL; TestRestartWithoutPersistenceFreesHeldLockAndHolderLearnsAtRenewal),
// and tokens restart from 1 (TestRestartWithoutPersistenceRestartsTokens): a
// resource that checks tokens refuses the new holder's writes until its
// tokens pass the old ones, so use persistence if the resource relies on
// tokens. Partition: a holder
// cut off from Redis cannot renew; its Lease.Done closes before the TTL
// runs out on the server, i.e. before anyone else can be granted the lock.
//
// Eviction, flushes and failover: a lock key has a TTL, so a server whose
// maxmemory-policy evicts keys (every volatile-* and allkeys-* policy; the
// default of several hosted offerings) may delete a held lock under memory
// pressure and grant it to the next client at once; the evicted holder
// learns it only at its next renewal (within a third of its TTL), which
// fails with ErrLeaseLost, so there are two holders meanwhile. The fence
// counter has no TTL: volatile-* policies keep it (the next token is
// higher), allkeys-* ones may evict it too, and tokens then restart
// (TestEvictedLockIsLostAtNextRenewal). Open therefore reads the policy
// with CONFIG GET (on every master of a cluster) and refuses an evicting
// one, with an error naming the policy and the fix, CONFIG SET
// maxmemory-policy noeviction; the URL parameter allow_eviction=true (or
// WithEvictionAllowed) accepts the risk, with a warning logged. Refusing
// is the default because the risk is silent and the fix is one setting.
// Where CONFIG is disabled or renamed, as on many
// hosted services, the policy cannot be read: Open logs a warning
// (slog.Default) and goes on — check the policy yourself. New does not
// check; call CheckEviction. FLUSHALL and FLUSHDB delete locks and
// counters alike: two holders, and tokens restart even with
// durable_fencing (TestFlushAllFreesLocksAndRestartsTokens). A failover to a replica (Sentinel, a cluster's replica
// promoted, a hosted service's failover) loses the writes not yet
// replicated, lock keys as well as counter increments: a lock granted just
// before the failover may be missing on the new primary and be granted to
// another client; the old holder's next renewal fails with ErrLeaseLost,
// and until then there are two holders.
//
// # Compat mode: compat=setnx
//
// With compat=setnx in the URL (WithCompat("setnx")), the lock name is a
// Redis key, verbatim, locked as redis-py's Lock, redsync, bsm/redislock
// and redlock-py lock it: acquire is SET key <value> NX PX ttl; extend
// (PEXPIRE) and release (DEL) act only while the key holds the caller's
// value. dlock's value begins with its random owner key (128 bits), and
// carries its token, the name and the holder metadata after it; a foreign
// client compares only its own value, so it sees dlock's as a lock held
// by someone else, and dlock sees any value that is not its own as a
// foreign holder. dlock's other keys of the lock are its own:
//
//	<prefix>:setnx:fence:<name>  the fence counter, INCRed in the acquire script (dlock-only)
//	<prefix>:setnx:wake:<name>   the channel dlock's releases publish on
//
// A lock name that begins with "<prefix>:" is refused (ErrInvalidName), so
// a lock key is never one of these. Redis Cluster is refused: the key and
// its counter could hash to different slots.
//
// Waiting has no queue, since a foreign client's release would not serve
// it: waiters retry (driver.AcquireByRetry). They are woken by dlock's
// releases on the lock's channel, and by the key's deletion or expiry,
// whoever held it, when the server announces those on its keyspace
// channels: Open reads notify-keyspace-events with CONFIG GET and listens
// on __keyspace@<db>__:<name> if it holds K and g and x (or K and A). To
// enable it:
//
//	CONFIG SET notify-keyspace-events Kgx
//
// (and the same line in redis.conf; if the setting already has flags,
// keep them and add these). Otherwise, and where CONFIG is refused, or
// with New unless WithKeyspaceEvents is given, a waiter also polls every
// SetNXPoll (100ms), each pause spread over [50ms, 100ms] by
// driver.Jitter; and it looks again when the holder's PTTL runs out.
//
// What dlock keeps of its contract, and what the foreign side lacks:
//
//   - Mutual exclusion: kept, among all clients of either kind, on one
//     server; the clock assumption is the one above (the TTL runs on the
//     server's clock).
//   - Fencing: dlock's grants carry tokens from the counter, increasing
//     across release, expiry, crash and Break as in the default layout.
//     Foreign grants take no token: a grant sequence dlock, foreign,
//     dlock gives the two dlock holders increasing tokens, but the foreign
//     holder's writes carry none, so a resource that checks tokens cannot
//     refuse a stale foreign holder's writes, nor a stale dlock holder's
//     writes made after a foreign grant if the foreign holder wrote no
//     token. Fencing protects the resource only from dlock's own clients.
//   - Renewal and loss notice: dlock's leases are renewed at TTL/3 and
//     Lease.Done closes when a renewal fails (expiry, Break, a foreign
//     DEL). The foreign side has its own renewal or none (redis-py:
//     extend() when the application calls it) and no loss notice: it
//     learns of a loss only when its release or extend is refused.
//   - Crash of a holder: either kind's lock frees when its TTL runs out.
//     A foreign lock without a TTL (redis-py with timeout=None) never
//     frees by itself: Inspect shows it with no expiry, and dlock break
//     removes it.
//   - Waiting: dlock's waiters are woken as said above; foreign waiters
//     poll at their own pace (redis-py: every sleep=0.1s by default), so
//     after a release dlock's waiters usually win; there is no fairness
//     across kinds, and WithFair is refused (ErrUnsupported).
//   - Inspect shows a foreign holder as held, with token 0, an unknown
//     holder and the key's PTTL as its expiry; Break deletes the key
//     whoever holds it; List with a prefix SCANs the string keys under
//     it (every such key is shown as a lock: give the prefix your lock
//     keys use), and with none lists the names dlock has locked (from
//     their fence counters), without foreign-only locks.
//
// A mixed fleet therefore guarantees mutual exclusion and liveness within
// the TTLs; fencing and loss notice hold for dlock's clients only.
// TestMixedFleetWithRedisPyLosesNoIncrement runs three dlock processes
// and three redis-py processes on one counter.
//
// # URL
//
//	redis://[user:password@]host:port[/db][?param=value&...]
//	rediss://...  (TLS)
//	redis://[user:password@]host1:port1?addr=host2:port2&addr=host3:port3
//	redis://host:port?cluster=true   (Redis Cluster, from one seed node)
//
// A URL with addr= parameters or cluster=true opens a Redis Cluster: the
// host and the addr= nodes are seeds, from which go-redis learns the
// cluster's layout (as redis.ParseClusterURL; a cluster has only database
// 0). The parameters — the driver's prefix, waiter_ttl, durable_fencing
// (see Fencing), allow_eviction (see Eviction), cluster and compat (see
// Compat mode); the TLS
// parameters of rediss:// (ca, cert, key, server_name, skip_verify); and
// go-redis's own (dial_timeout, read_timeout, pool_size, …; see
// redis.ParseURL and redis.ParseClusterURL) — are described in the
// README's table of URL parameters,
// https://github.com/dlock/dlock#url-parameters. An unknown parameter is
// an error that names it.
//
// go-redis logs through one process-wide logger; Open points it at the
// logger given to dlock.Open (debug level), so that its own lines (a
// failed dial of the pool) do not reach stderr. New leaves it alone.
//
// Passwords never appear in errors.
package redislock
