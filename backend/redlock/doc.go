// Package redlock is dlock's Redlock backend: a lock held on a majority of
// N independent Redis nodes (no replication between them), so that it
// survives the loss of a minority of them; and semaphores, whose permits
// are slots held the same way (see Semaphores).
//
//	import _ "github.com/dlock/dlock/backend/redlock"
//	c, err := dlock.Open(ctx, "redlock://:pass@h1:6379,h2:6379,h3:6379/0")
//
// or, over clients you already have,
// redlock.New([]redis.UniversalClient{n1, n2, n3}) and dlock.New.
//
// # Mechanism
//
// It runs the Redis backend's scripts (backend/internal/redisscript) on
// every node in parallel. An acquire is two rounds:
//
//  1. On every node: if the lock key is absent, set it with PX = TTL (and
//     token 0); report the node's fence counter and its fence state (below),
//     read in the same step. The lock is won if a majority granted it.
//  2. The token is one more than the largest counter reported, which must
//     include a majority of nodes whose fence state is complete; on every
//     node that answered round 1, raise the fence counter to it (never
//     lowering it), and where the lock is the owner's, store the token in
//     it. A majority must confirm the lock. The counter is raised on the
//     nodes that refused too (the lock there is another's, e.g. a stale
//     one a release did not reach), so that the latest counter is on as
//     many nodes as can be reached.
//
// The grant is valid for TTL − elapsed − drift, where elapsed is the time
// since round 1 was sent and drift = TTL/100 + 2ms allows for the nodes'
// clocks running faster than ours; the lease's deadline (Lease.Expires)
// is set accordingly. If fewer than a majority grant, or the validity is
// used up, the lock is released on all nodes and the attempt fails. Each
// node call is bounded by a timeout (TTL/5, within 50ms..2s), so a dead or
// frozen node costs one timeout, not the lease (TestOpenBoundsEachNodeCall;
// clients given to New need ContextTimeoutEnabled, as Open sets it).
//
// Renewal extends the lock on every node that still holds it and succeeds
// on a majority. Release deletes it on all nodes and publishes a wake-up on
// each; waiters subscribe on every node (one shared pub/sub connection per
// node) and need a majority of subscriptions before they wait.
//
// Break deletes the lock, or every permit of a semaphore, on every node,
// whoever holds it, and succeeds only if a majority of nodes answered (deleted it, or did not have it): then no
// majority holds it, and the holder's next renewal fails. A Break that
// reaches fewer nodes returns ErrUnavailable naming the nodes that did not
// answer: the holder may still renew on a majority.
//
// # Semaphores
//
// A semaphore of n permits (dlock's Client.Semaphore, Request.Limit = n)
// is n slots, 0..n-1, and a permit is one slot held on a majority of the
// nodes, each slot exclusive as a lock is. Its acquire is the lock's two
// rounds:
//
//  1. On every node: if fewer than the request's n permits are held
//     there, take a free slot below n (the lowest free one, or one asked
//     for), with token 0, and report the name's fence counter and the
//     node's fence state, read in the same step. The permit is won if a
//     majority gave the same slot; nodes that gave another slot give it
//     back. When a majority gave slots but not the same one (clients took
//     them in different orders), the attempt gives them all back and asks
//     again, at most three times, for the quorum-th lowest slot given.
//  2. The token is one more than the largest counter read, from the
//     name's fence counter (the one its mutex would use, with its fence
//     states and re-seeding). On every node that answered round 1: if the
//     counter is below the token, raise it to the token, and only then
//     the node claims the token for this grant; where the owner holds the
//     slot, store the token in its permit. A majority of nodes with
//     complete counters must both claim the token and hold the slot.
//
// Why slots: counting the permits on each node and granting on a
// majority would not be safe. With three nodes and n = 2, holders A on
// {n1, n2}, B on {n2, n3} and C on {n1, n3} leave exactly two permits on
// every node, and three holders. A slot, like a lock, is given by each
// node to one owner at a time, and two majorities share a node, so a slot
// has one holder and a semaphore at most n
// (TestPartitionedContendersNeverExceedThePermits builds that partition:
// the third client is refused, and granted once a permit is released).
// That rests on what the lock's mutual exclusion rests on (clocks that
// run at nearly the same rate, and the restart caveat below); a permit
// held on a minority is no grant, and is given back
// (TestPermitOnMinorityIsNoGrant).
//
// Why claims: permits are held at once, so two grants can read the same
// counters in round 1 and decide the same token. A node claims a token
// for one grant only, and two majorities share a node, so no two permits
// get the same token (TestConcurrentPermitsNeverShareAToken: six permits
// granted at the same moment, eight times); a grant that loses the claim
// gives its permit back and tries again. A permit's token is above that
// of every grant, permit or lock, whose round 2 completed before its
// round 1 began, for the reasons given below for locks (the grant's
// majority raised the counter; the next one reads a node of it), and the
// re-seed of a node waits for a permit between its rounds as it does for
// a lock (TestReseedWaitsForPermitBetweenRounds).
//
// Clients that disagree on n: a request with limit m takes only a slot
// below m, and only on nodes that hold fewer than m permits. So the
// holders that asked with m or less are never more than m (they share m
// slots), and all holders never more than the largest n in use. That a
// request with limit m is granted only while fewer than m permits are
// held is checked on each node of its majority: it holds when each of
// those nodes has every permit held (every client reaching every node,
// as in dlocktest's SemaphoreLoweredLimitWaitsForHoldersAboveIt and
// SemaphoreDisagreeingLimitsNeverExceedTheLowerOne), but when permits
// are held on some majorities only (a partition, a node down or
// restarted) it is the per-node count of the example above: with B
// (n = 5) in slot 1 on {n1, n2} and X (n = 5) in slot 2 on {n2, n3}, a
// request with m = 2 on {n1, n3}, each of which holds one permit, is
// granted beside them (TestDisagreeingLimitsUnderPartitionAreCountedPerNode).
// Lower a limit while every node is reachable, or accept up to the old
// limit for as long as its holders keep their permits.
//
// Renewal and release act on every node and check both the owner and the
// slot there; renewal succeeds on a majority
// (TestPermitRenewalNeedsAMajority, TestPermitRenewalChecksTheSlot).
// Release and Break publish a wake-up on the name's channel on every
// node (TestPermitReleaseWakesWaiters), and waiting is the lock's
// (driver.AcquireByRetry over the same subscriptions): a waiter
// subscribed on a majority tries again at each wake-up, and, since an
// expiry publishes nothing, when the first permit held on a majority
// expires, or at the fallback poll. There is no fair queue (Fair is
// ErrUnsupported), so nothing is queued: a cancelled wait leaves nothing
// behind once a permit granted to an attempt in flight is given back, as
// for a lock (dlocktest's SemaphoreCancelledAcquireLeavesNothingBehind).
// Break frees every permit on every node and succeeds as for a lock
// (SemaphoreBreakFreesEveryPermit).
// Inspect and List report the permits that a majority of nodes hold for
// the same owner in the same slot, each with the largest token among its
// copies and held until all but quorum-1 of its copies expire. In
// compat=setnx there are no semaphores (ErrUnsupported).
//
// # Fence states: a node that lost its counters does not count
//
// Every node has a key <prefix>:fence-state (no TTL) that says whether its
// fence counters are complete. A node that restarts without persistence
// comes back without it. Such a node takes part in round 1 (its lock
// counts toward the lock's majority) and round 2 (its counter is raised),
// but a token is issued only if a majority of all N nodes answered round 1
// with a complete state; otherwise the attempt fails with ErrUnavailable
// saying so, e.g. "2 of 3 nodes reachable but only 1 holds its fence
// counters (h3:6379 has no fence state: restarted empty, or never
// seeded)". Round 1 reads this key in the same script as a lock's keys,
// which are in another hash slot: each node must be a standalone server,
// not a Redis Cluster.
//
// A grant that sees a complete majority and a node without complete
// counters re-seeds that node in the background: it marks the node as being
// seeded (with an id of its own, and a claim of two minutes on the node's
// clock, during which other clients leave the node to it), finds every
// lock's keys on the other nodes by SCAN, reads each counter on a majority
// of complete nodes (in the same step as their fence state), raises the
// node's counters to the largest values read (a Lua script that only ever
// raises a counter, so that a copy of an older value cannot undo a grant's
// round 2 made meanwhile), and marks it complete only if its state is still
// the one the copy began with: a restart during the copy (which drops the
// state) or another client's re-seed (which replaces the claim once it ran
// out) leaves it incomplete, to be re-seeded again. A grant between its two
// rounds has its lock, with token 0, on every node whose counter its round
// 2 will raise; the re-seed finds that lock and reads that counter again
// until the round is done, so the copy includes the grant's token even when
// a node that confirmed it loses it. Until the copy is complete, grants go
// on with the complete majority. A re-seed takes one SCAN of each node and
// a few round trips per 200 locks.
//
// A deployment where no node has a fence state (a new one, or counters
// left by an earlier version of dlock) is seeded at its first acquire,
// which needs every node to answer: each node gets the largest of every
// counter found on all of them and is marked complete (a seeding that
// outlasts the acquire goes on in the background, and acquires fail with
// ErrUnavailable until it is done). A first seeding that stopped half-way,
// with some nodes complete and the others still new, is finished by the
// next acquire.
//
// # What the fencing token guarantees
//
// The token is strictly greater than that of every earlier grant whose
// round 2 completed, provided that each node either keeps every write it
// acknowledged or comes back without its fence state (see Persistence),
// and that no majority of the nodes loses its counters. A grant's round 2
// wrote its token into the counters of a majority W; the next grant reads
// the counters of a majority R of complete nodes; W and R share a node.
// That node either kept the token, or lost it and has been re-seeded
// since, from a majority that shares a node with W (which had the token,
// or was re-seeded in turn), reading it after the grant's round 2 there.
// On each node the order is fixed by the lock itself: round 2 of the
// earlier grant ran while its lock was there (it is owner-checked), and
// the later grant could only set its lock after that lock was gone. So
// the token order does not depend on any clock: a node whose clock jumps,
// or a holder paused by GC past its TTL, can break mutual exclusion but
// not the order of tokens.
//
// So a node that restarts empty costs nothing but its vote on the token
// until it is re-seeded (TestTokensIncreaseAcrossOneNodeRestartedEmpty
// restarts each node of three in turn), even combined with a partition:
// with n1 cut off, a grant on {n2, n3} gets token 11 (n1 has 10); n3
// restarts empty; a grant that reaches only {n1, n3} is refused rather
// than issue 11 again (TestNoTokenRepeatAfterPartitionThenEmptyRestart,
// TestDoubleFaultRefusesThenRecoversHigher), and once a complete
// majority answers, n3 is re-seeded and tokens go on increasing. A
// re-seed running during grants never lowers a counter
// (TestReseedConcurrentWithGrantsNeverLowersCounter), and waits for a
// grant between its rounds (TestReseedWaitsForGrantBetweenRounds).
//
// The price is availability: a second node that loses its counters
// before the first is re-seeded leaves fewer than a majority complete
// (with three nodes), and acquiring is refused from then on
// (TestMajorityLosingCountersRefuses), where tokens would otherwise
// restart at 1. Restart nodes one at a time, each after the previous one
// is complete again (Driver.FenceStates, or GET <prefix>:fence-state on
// the node; its re-seed starts at the first acquire that reaches it). To accept that tokens
// issued only on the lost nodes may repeat, DEL <prefix>:fence-state on
// every node: the next acquire that reaches every node then seeds them
// all from the largest counters left (TestFirstUseSeedsEveryNode).
//
// A node restarted empty can still break mutual exclusion: its locks are
// gone, so another client can win a lock it held plus one more node whose
// copy expired or was lost, and the old holder learns of it at its next
// renewal, refused by a majority (make verify's partition-restart fault,
// allowance empty-restart). Fence states protect the tokens, not the
// locks; to protect the locks, restart an empty node only after the
// longest TTL in use has passed (antirez's "delayed restart"), when every
// lock it held has expired anyway.
//
// # Persistence and eviction
//
// Fence states detect a node that lost everything, not one that lost only
// its last writes. Run every node either without persistence (it restarts
// empty, which is detected) or with appendonly yes and appendfsync
// always (it restarts with every write it acknowledged). With appendfsync
// everysec (Redis's default for AOF), a node that crashes comes back with
// its fence state, written long before, but without up to the last second
// of writes: counters raised in that second by grants are lower again,
// while the node counts as complete; if a grant's majority W was that
// node and one other, and the next grant reads that node and a node that
// missed the grant (cut off), the token repeats. RDB snapshots lose
// everything since the last snapshot, in the same way, and so does a
// failover to a replica that had not received the last writes. With such
// persistence, DEL the node's <prefix>:fence-state before clients reach
// it after a crash, so that it is re-seeded.
//
// A node that evicts keys is a node that loses data: under volatile-*
// policies it may evict held locks (two holders; counters and the fence
// state have no TTL and stay), and under allkeys-* also counters, while
// keeping its fence state, so tokens can repeat (evicting the fence state
// itself is harmless: the node is re-seeded). Open therefore refuses nodes
// with an evicting maxmemory-policy unless allow_eviction=true (as the
// Redis backend does; where CONFIG is disabled it logs a warning): with
// allow_eviction=true and an allkeys-* policy, the token guarantee above
// does not hold. Capabilities().DurableFencing is false, since dlock
// cannot see how the nodes persist.
//
// # The debate, and what dlock does about it
//
// Martin Kleppmann ("How to do distributed locking", 2016) argued that
// Redlock is unsafe for correctness: it assumes bounded network delay,
// bounded process pauses and bounded clock error, and a GC pause or a clock
// jump lets two clients hold the lock at once; and that Redlock has no
// fencing token, so the resource cannot refuse the stale client. Salvatore
// Sanfilippo (antirez, "Is Redlock safe?") replied that clocks need only a
// bounded rate error (use monotonic time, no NTP steps), that the elapsed
// time is measured after acquiring so delays during the acquire are
// accounted for, that a pause after the check is a problem for every lease
// system including those with fencing, and that a random unique value
// with check-and-set at the resource can play the role of a token. Both
// are right about something: a lease cannot protect against a client that
// is paused after checking it, and only the resource can — with a token it
// can compare.
//
// dlock therefore gives Redlock what it lacked: a fencing token that
// increases across grants (above, with its limits stated), and loss
// detection — Lease.Done closes, and a Do callback's context is cancelled,
// when the deadline (send time of the last renewal confirmed by a majority
// + TTL − drift margins, on the monotonic clock) passes. The lease's TTL
// still depends on clocks running at nearly the same rate; the token does
// not. For correctness, have the resource check the token; for efficiency
// (avoiding duplicate work), the lease alone is enough.
//
// # Compat mode: compat=setnx
//
// With compat=setnx in the URL (WithCompat("setnx")), the lock name is a
// Redis key, verbatim, and each node is locked as redlock-py, and
// redsync over several pools, lock it: SET key <value> NX PX ttl on every
// node, granted when a majority answered yes within the validity time
// (TTL − elapsed − drift), undone on every node otherwise; extend and
// release act only where the key holds the caller's value. The keys, the
// reserved names, the value and what a mixed fleet keeps of dlock's
// contract are those of package redislock's compat mode (its package
// documentation, point by point), with these differences:
//
//   - Fencing: the token is decided across the nodes as in the default
//     layout (fence states and re-seeding included: a seeding finds the
//     counters <prefix>:setnx:fence:<name>, and a grant's first round
//     creates its counter so a seeding between its rounds finds it); it
//     is dlock-only, and what it guarantees is what the section above
//     says, for dlock's grants only.
//   - Waiting: a waiter listens on every node, on the lock's channel, and
//     on the key's keyspace channel of each node that Open found
//     announcing deletions and expiries (CONFIG SET notify-keyspace-events
//     Kgx); unless every node does, it also polls (every 100ms at most,
//     jittered). New does not read the nodes' configuration: its waiters
//     poll.
//   - Inspect reports a foreign holder when a majority of nodes hold the
//     same foreign value, with the PTTL after which no majority holds it.
//
// TestDlockAndRedlockPyExcludeEachOther runs a redlock-py style client
// (testdata/redlockpy.py, on redis-py) beside dlock on three nodes.
//
// # URL
//
//	redlock://[user:password@]host1:port1,host2:port2,host3:port3[/db][?param=value&...]
//	redlocks://...  (TLS to every node)
//
// The user (an ACL user, or none for the default user), password, database
// and go-redis parameters (dial_timeout, read_timeout, ...) apply to every
// node, and so do the TLS parameters of redlocks:// (as for the Redis
// backend's rediss://; each node's certificate is checked against its own
// host name). The parameters — prefix, allow_eviction, compat, the TLS parameters
// (ca, cert, key, server_name, skip_verify) and go-redis's — are
// described in the README's table of URL parameters,
// https://github.com/dlock/dlock#url-parameters.
//
// IPv6 nodes cannot be written in the URL (Go's URL parser
// accepts one bracketed host only); use New. Passwords never appear in
// errors.
package redlock
