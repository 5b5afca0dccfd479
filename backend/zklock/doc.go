// Package zklock is dlock's ZooKeeper backend: Apache Curator's
// InterProcessMutex recipe over github.com/go-zookeeper/zk, with a context
// on every call, a try-lock, and a lease whose loss is observable.
//
// # The recipe
//
// Every lock name has a parent node, <root>/<escaped name>, and each
// request to lock it creates an ephemeral sequential child
// "_c_<guid>-lock-<sequence>" holding the requester's metadata
// (Request.Holder, shown by Inspect). The child with the lowest sequence
// holds the lock; the others wait in sequence order, so grants are FIFO
// (Capabilities.Fair). The sequence is the parent's int32 child version,
// which wraps to negative numbers after 2³¹ creates and deletes of
// children; sequences are compared as serial numbers, so that the order
// holds across the wrap.
//
// The create goes in one transaction with an empty write to the parent:
// the parent's stat that this write returns tells how many children the
// parent has — one means the new node is alone and holds the lock, so an
// uncontended lock is a single round trip — and carries the transaction's
// zxid, the new node's czxid (go-zookeeper returns neither the stat nor the
// zxid of a plain create).
//
// A waiter watches the node just ahead of it, and, from third place back,
// also the node ahead of that one; nobody watches the parent. When the node
// just ahead goes and it was the only one ahead (no lower node can appear),
// the waiter holds the lock without another round trip. When the node two
// places ahead goes, the waiter's predecessor has most likely just been
// granted the lock: the waiter lists the queue then, while the predecessor
// holds, so that the predecessor's release is its turn at once. A deletion
// therefore wakes at most two waiters, never the whole queue (no herd), and
// a hand-off under contention costs the release's write and one watch
// event. (Semaphore waiters do watch the parent: see Semaphores.)
//
// The "_c_<guid>-" prefix is Curator's protected mode: if the connection
// drops before the reply to a create arrives, the client cannot know
// whether the node exists. It looks for its GUID among the children (after
// a sync, so that the server it asks has seen whatever the leader has) and
// adopts the node it finds, rather than creating a second one and leaving
// an orphan that would hold the lock for the life of the session. A waiter
// whose context ends deletes its node, in the background if the connection
// is down at that moment, for as long as the node's session lives; a try-lock
// that finds the lock held first only lists the queue, and does not enqueue
// at all (TestFailedTryLockDoesNotQueue).
//
// A follower answers reads from its own state, which may lag behind a write
// another client has already seen succeed. Reads that answer a question
// about other clients — Inspect, List, Break's choice of holder, and a
// try-lock's finding that the lock is held — are therefore made after a
// sync: a lock released before the call began is never reported held, and
// one granted before it is never reported free. So are renewals (see
// below).
//
// Parent nodes are ZooKeeper container nodes, created on demand: the server
// deletes a container once its last child is gone (every
// znode.container.checkIntervalMs, one minute by default), so lock names do
// not accumulate empty parents. A create that races with that deletion
// fails with NoNode and is retried after re-creating the parent. (The server
// keeps a container that never had a child; that happens only when every
// create under a new parent failed, and the next use of the name clears
// it.) The root (and the path leading to it) are ordinary persistent
// nodes, with the ACL of the driver that creates them first.
//
// # Semaphores
//
// A semaphore of n permits (Request.Limit n > 1; Capabilities.Semaphore)
// uses the same queue: each acquirer creates the same ephemeral sequential
// node, whose data, the holder metadata, records its n. A node holds a
// permit when fewer than its own n nodes are ahead of it and every node
// ahead holds; so holders are the head of the queue, and a client that
// asks with a lower n than the holders' waits until fewer than its n hold
// (SemaphoreLoweredLimitWaitsForHoldersAboveIt), and one with a higher n
// queued behind it waits behind it
// (SemaphoreDisagreeingLimitsKeepQueueOrder). Grants follow the queue, so
// tokens (czxids) increase in grant order across all permits. A try-lock
// does not queue when n or more nodes are queued (after a sync, as for the
// mutex). Since any deletion ahead may be a waiter's turn, not only its
// predecessor's (SemaphoreWaiterWakesOnAnyReleaseAhead), a waiter watches
// the parent's children and checks again on each change: every release
// and every new contender wakes every waiter of the semaphore, a herd that
// Curator's InterProcessSemaphoreV2 has too, and a waiter within its n
// reads the n of each node ahead once. Inspect lists the holders in
// Info.Permits; Break deletes every holder's node
// (SemaphoreBreakFreesEveryPermit). A cancelled wait deletes its node and
// a killed holder's node goes with its session, as for the mutex
// (SemaphoreCancelledAcquireLeavesNothingBehind,
// SemaphoreCrashedHolderFreesPermitWithinTTL). In the compat layouts a
// semaphore is refused with ErrUnsupported (Capabilities.Semaphore is
// false there): kazoo's Semaphore and Curator's InterProcessSemaphoreV2
// keep nodes of other layouts, which dlock's permits would not count
// against (TestCompatRefusesSemaphores).
//
// A read-write lock (Capabilities.RWMutex) uses the same queue and the
// same watch: a reader's node (its data marked shared) holds when every
// node ahead holds and none of them is a writer's, a writer's when it is
// the head; a reader that comes after a waiting writer waits behind it
// (dlocktest's RWMutex tests). The rule is driver.QueueHolders, shared
// with etcdlock. Not in the compat layouts either (kazoo's and Curator's
// read-write locks name their nodes differently).
//
// # Names
//
// Lock names are any UTF-8 string of 1..1024 bytes; ZooKeeper path segments
// cannot hold '/', NUL, control characters, some Unicode ranges, nor be "."
// or "..". The parent's segment is the name with printable ASCII kept as it
// is, except '/', '%' and a leading '.', and every other byte written as
// %XX (upper-case hex): "orders/42" is "orders%2F42", ".." is "%2E.",
// "ключ" is "%D0%BA%D0%BB%D1%8E%D1%87". The mapping is one-to-one, so no two
// names share a lock, and List decodes it back.
//
// # Fencing token
//
// The token is the lock node's creation zxid (czxid). ZooKeeper orders all
// writes of the ensemble in one sequence of zxids (the leader's epoch in
// the high 32 bits, a counter in the low ones; a new leader starts a higher
// epoch), and a zxid is written to the transaction log before the write is
// acknowledged, so it survives restarts of any or all servers. A holder's
// node was created after the node of the holder before it (it queued behind
// it, or was created after that one's deletion), so each grant's czxid is
// higher than the previous grant's: strictly increasing per name, across
// release, session expiry, crash, Break and server restarts
// (Capabilities.DurableFencing). The sequence number would not do: it
// counts per parent, and restarts from zero when the empty parent is
// deleted.
//
// # Sessions, leases and time
//
// A ZooKeeper lock lives as long as its node, and an ephemeral node as
// long as its session: the server ends a session that it has not heard from
// for the session timeout, measured by the server's clock, and deletes the
// session's nodes. The driver uses one session (its connection) for all its
// locks; when ZooKeeper expires it, every lease of the driver is lost: when
// the driver reconnects and go-zookeeper reports the session expired, the
// Grant.Lost of every lock held in it fires, renewed or not
// (TestSessionEndLosesEveryHeldLock; go-zookeeper then opens a new session
// for later calls).
//
// A held lock costs the client no goroutine and no timer of its own: the
// driver keeps its held nodes in one table, with one timer for all their
// lease deadlines (driver.Alarms), and the events of its connection — a
// watch's, and the session's — are dispatched from go-zookeeper's
// receiving goroutine to the nodes they concern. From its lease's first renewal on, a holder
// watches its own node (the renewal's read sets the watch, at no extra
// request), and a deletion (a Break) fires its Grant.Lost at once, and no
// other lock's (TestHeldLocksCostNoGoroutineAndABreakLosesOnlyItsLock).
// A driver made by New, over a connection whose events it cannot see, has
// none of this: each watch's event is passed on by a goroutine of its own,
// and an expired session is seen by the watches set by then and by the
// next renewal of each lease.
//
// A client cannot see its session expire while it is cut off, so the lease
// is also bounded in time. Sessions are expired by the leader, when it has
// not heard of one for the session timeout: from the client itself, or from
// the follower the client talks to, which reports its clients' activity to
// the leader every half tick. A renewal (Extend) is a sync followed by a
// read of the holder's node. The server answers a sync only once the
// leader has, after applying every write the leader committed before it —
// a session's expiry and the deletion of its nodes included — so the
// answer proves that the session, and the node, were alive at the leader
// after the renewal was sent. A plain read would prove nothing of the
// kind: a follower cut off from the leader goes on answering reads from
// its own state until it gives the leader up, syncLimit ticks later, while
// the leader may expire the session and grant the lock to someone else.
//
// Renewals share their syncs: those that arrive while a sync of the
// driver is in flight wait for the next one, sent when it returns, so that
// a driver has at most one sync in flight however many leases it holds,
// and the sync is sent after each renewal it serves began. Once the holder
// watches its node, the renewal needs no read of its own: the server sends
// a watch's event (the node's deletion, or the end of the session) before
// its answer to any later request, and the driver handles the event as it
// is received, before the sync's answer is returned; so a node not
// reported gone when the sync returns was there when it was sent. (A
// driver made by New, whose connection's events it does not see, reads
// the node at each renewal.)
//
// A client holding many locks renews them in batches (driver.BatchExtender,
// up to 256 leases a call): one sync for the batch, then a read only of
// the nodes not yet watched on the current connection, 32 at a time. The
// conformance test BatchRenewalRenewsEachLeaseAndReportsEachLoss checks
// that a batch renews each live lease past the deadline it had without it
// and refuses each released, broken, or expired one.
//
// Every held lock still costs its client a renewal every third of the
// lease, whatever the batch, so the session timeout bounds how many locks
// a client can hold: on the 2-core machine of bench/README, eight clients
// with the default 10 s session held 500,000 locks between them in one
// run, and in the next fell behind their renewals at 489,000 (220,000
// renewals a second), so that their leases ran out; with a session of 2
// minutes they held a million. A
// program that holds hundreds of thousands of locks wants a long session
// (Curator's default is 60 s), at the price of a crashed holder's locks
// staying held that long.
//
// The lease TTL (Grant.TTL, Lease.TTL) is two thirds of the negotiated
// session timeout, and dlock's portable deadline runs from the send time of
// the last confirmed renewal, or of the create that queued the node, both
// of which reached the leader (waiting in the queue reads from any server,
// so a waiter that waited longer than a quarter of the lease renews before
// its grant returns). Renewals go out a third of the lease apart — two ninths of the
// session timeout. If the follower is cut off just after forwarding a
// renewal's sync, its report to the leader may miss that renewal, but it
// carries the one before, as long as half a tick is shorter than the time
// between renewals: a session timeout of at least three ticks (with
// ZooKeeper's default tickTime of 2s, 6s or more; ZooKeeper itself accepts
// two ticks). The leader then expires the session no earlier than seven
// ninths of the timeout after the last confirmed renewal was sent, after
// the lease deadline at six ninths. The margin also covers go-zookeeper's
// own failure detector, which gives up a silent connection after two thirds
// of the timeout. So Done closes before the leader can expire the session,
// as long as the client's and the servers' clocks run at nearly the same
// rate (dlock allows 1%).
//
// The sync costs a round trip to the server and, through a follower, one
// between it and the leader; it writes nothing, and one serves every
// renewal waiting for it. BenchmarkRenewal measures renewals one at a
// time (no sharing), on loopback, against the plain read of the node.
//
// A disconnection shorter than the lease keeps it: go-zookeeper
// reconnects (to any server of the ensemble) within the session, the
// renewal succeeds, and the node never went away. If the lease's deadline
// passes while the session survives (a disconnection just longer than the
// lease), the driver deletes the node itself once it can, since its holder
// has been told it lost the lock and will not release it
// (TestLeaseDeadlinePassedInLiveSessionDeletesTheNode).
//
// The requested TTL cannot shorten a session: a crashed holder's lock is
// freed when its session times out, so Capabilities.MinTTL is the session
// timeout and a shorter WithTTL is refused; a longer one is granted as the
// session's lease (two thirds of the session timeout, renewed every third
// of that). To change it, change the session timeout
// (?session_timeout=, within the server's minSessionTimeout and
// maxSessionTimeout: 2 and 20 ticks by default).
//
// # Failures
//
//   - Clock: session timeouts are measured by the servers; the client uses
//     its monotonic clock for the lease and assumes only a bounded rate
//     difference.
//   - Holder crash: its session times out (the session timeout after its
//     last message) and the server deletes its node; the next waiter is
//     woken by its watch. A clean Close ends the session at once
//     (TestCleanCloseFreesTheLockAtOnce).
//   - Partition: the holder's side stops confirming renewals and closes
//     Done at its deadline, before the server can expire the session; the
//     server expires it a session timeout after it last heard from the
//     client and the next waiter is granted, with a higher token.
//   - Follower cut off from the leader, its clients still reaching it: the
//     holder's renewals through it stop being confirmed at once (their
//     syncs wait for a leader the follower cannot reach), so Done closes at
//     the lease deadline, before the leader expires the session and grants
//     the lock to a client of the majority — even when the follower goes
//     on answering reads for longer than the session timeout (syncLimit
//     ticks).
//   - Server restart: sessions and ephemeral nodes are in the snapshot and
//     transaction log, and a restarted server gives every restored session
//     a fresh timeout. A holder that reconnects before its lease deadline
//     keeps its lock (same node, same token); a holder whose deadline passed
//     during the outage sees Done close, and its node is deleted by the
//     client when it reconnects, or by the server a session timeout after
//     the restart. Tokens keep increasing either way.
//   - Ensemble: losing a minority of servers does not stop the locks:
//     clients reconnect to another server within their session, grants go
//     on with increasing tokens, and a holder either keeps its lock or sees
//     it lost, never both it and another client holding it (TestEnsemble's
//     StoppedLeaderDoesNotStopGrants). A server without a quorum cannot
//     confirm a renewal (its sync waits for a leader), so its clients'
//     holders see Done close at their deadlines (the follower cut off
//     above).
//   - Break deletes the holder's node (it needs the delete permission on
//     the parent: with digest auth, the same identity); the holder's watch
//     sees the deletion and Grant.Lost fires at once (in the first third of
//     a lease, at its first renewal). If the holder's node goes before
//     Break's delete arrives, Break breaks the next holder if there is one
//     by then, and returns ErrNotHeld if the lock is free.
//   - A Release that meets the end of its session (the server expired it
//     while the holder was cut off) reports ErrLeaseLost, not a release.
//
// Capabilities.LockDelay is false: the recipe does not record whether the
// previous holder released or was lost, so WithLockDelay waits after
// every grant.
//
// # Compat layouts: kazoo and Curator
//
// With ?compat=kazoo or ?compat=curator, dlock writes and reads the lock
// nodes of kazoo's Lock (Python) or Curator's InterProcessMutex (Java), so
// that during a migration dlock and those clients exclude each other on
// one lock. Without compat, dlock's locks live under its root in a layout
// of its own, and kazoo and Curator do not see them
// (TestCompat/*/WithoutCompatForeignDoesNotSeeDlockLocks).
//
// The lock name is the lock path given to zk.Lock(path) or to new
// InterProcessMutex(client, path), verbatim: an absolute ZooKeeper path
// such as /locks/orders — not "/", without a trailing "/", an empty, "."
// or ".." segment, a character ZooKeeper refuses in paths, and not under
// /zookeeper. Any other name is refused with ErrInvalidName, which says
// so; the URL takes no root. A contender node is an ephemeral sequential
// child of the path, named as the foreign recipe names its own:
//
//	kazoo:    <path>/<guid>__lock__<sequence>     guid: 32 hex digits
//	curator:  <path>/_c_<guid>-lock-<sequence>    guid: 36-character UUID
//
// Its data is dlock's holder metadata. dlock's GUID is a version-8 UUID,
// which neither library makes (both make version 4): Inspect tells dlock's
// contenders from foreign ones by it.
//
// dlock orders its nodes and the foreign ones in one queue, the foreign
// recipe's way. kazoo's Lock counts as contenders the children whose name
// ends in "__lock__" and a ten-digit sequence (its Lock and WriteLock
// nodes; it ignores ReadLock's "__rlock__" nodes, and so does dlock), and
// sorts them by that sequence as a string. InterProcessMutex counts every
// child, and sorts them as strings by what follows the last "lock-" in the
// name. A waiter watches the node just ahead (and, from third place back,
// the one ahead of that, as in dlock's layout), and lists the queue again
// when it goes, as both libraries do; a foreign waiter whose predecessor
// is dlock's node watches that node, and is woken when dlock releases
// (TestCompat/*/ForeignWaiterQueuesBehindDlockHolder).
// Both libraries compare sequences as strings, so neither orders its queue
// across the wrap of the sequence after 2³¹ changes of the parent's
// children; in a compat layout dlock follows them, since a mixed queue
// must have one order.
//
// The create is a plain one, followed by a read of the new node's stat for
// its czxid (the token): the transaction with an empty write to the
// parent that dlock's own layout uses would erase the data of the
// application's lock node. An uncontended lock thus costs two round trips
// instead of one. Missing nodes on the path are created as the foreign
// recipe creates them: persistent, as kazoo's ensure_path does (a
// container would be deleted under a kazoo Lock that has already ensured
// its path, and its next create would fail with NoNode), or containers,
// as Curator's creatingParentContainersIfNeeded does. Both layouts begin
// the node's name with its GUID (kazoo borrowed Curator's protected mode),
// so a create whose reply is lost is recovered as in dlock's layout
// (TestCompat/*/ConnectionCutsDuringLockLeaveNoOrphans).
//
// dlock's side keeps its contract: the token is its node's czxid, and
// increases across dlock's grants with foreign grants between them (a
// node is granted after every node ahead of it, all created before it);
// the lease is renewed by a sync and a read, and its loss is notified, as
// above; Inspect shows a foreign holder or waiter, with token 0, no host
// or pid, and a note that quotes its node's data (kazoo's identifier,
// Curator's client address); Break deletes the holder's node, foreign or
// not. List takes a path prefix ("/locks/"), walks the nodes under it (at
// most 10,000) and reports the paths with contender nodes (for Curator,
// children whose name ends in "lock-" and a sequence); it refuses a
// prefix that does not begin with "/". The foreign side has less:
//
//   - No fencing token. kazoo's Lock and InterProcessMutex return none: a
//     resource that checks dlock's tokens cannot check a foreign holder's
//     writes, and exclusion between a foreign holder and the next holder
//     rests on ZooKeeper's session alone.
//   - No loss notice beyond its session. A foreign holder learns that it
//     lost the lock only from its client's connection state (kazoo's
//     SUSPENDED and LOST, Curator's ConnectionStateListener), if the
//     application listens; nothing watches its node. A Break deletes the
//     node and grants the lock to the next contender while the foreign
//     holder still believes it holds it.
//   - No lease bound. A foreign holder cut off from the ensemble goes on
//     until its client gives the connection up or sees the session
//     expire, possibly after the server has already granted the lock to
//     someone else; dlock's holders stop at their lease deadline, before
//     the server can expire their session.
//
// A mixed fleet therefore guarantees: one holder at a time, dlock's or a
// foreign one, while the holders' sessions live (TestCompat/*/
// MixedFleetLosesNoIncrement, DlockAndForeignExcludeEachOther); grants in
// one FIFO queue across both kinds; a crashed holder of either kind frees
// the lock within its session timeout
// (KilledForeignHolderFreesLockForDlockWaiter); fencing tokens and loss
// notices for dlock's holders only. After a partition or a Break, a
// foreign holder may still be working beside the next holder: a resource
// that must never see two writers needs every writer to carry a token,
// which only dlock's do.
//
// # URL
//
//		zk://[user:password@]host1:2181,host2:2181[/root][?session_timeout=10s&connect_timeout=15s]
//		zk://host1:2181,host2:2181?compat=kazoo|curator[&session_timeout=10s]
//
//	  - hosts: the ensemble's client addresses (port 2181 if omitted).
//	  - root: the node under which lock parents live; default /dlock (it and
//	    its ancestors are created when first needed). It plays the part of a
//	    chroot: "/" is refused, to keep locks out of ZooKeeper's own nodes.
//	  - user:password: digest authentication. Every node the driver creates
//	    then carries the ACL digest:user:password with all permissions and
//	    nothing for anyone else, so another identity can neither read,
//	    delete nor take these locks.
//	  - compat: kazoo or curator, the layout of another library's lock
//	    recipe (see above); the URL then has no root.
//	  - session_timeout (default 10s; the server clamps it to its limits,
//	    and the driver uses the negotiated value) and connect_timeout
//	    (default 15s; Open's context may cut it shorter): see the README's
//	    table of URL parameters, https://github.com/dlock/dlock#url-parameters.
//
// Open fails at once, with an error wrapping dlock.ErrUnavailable, when
// every server of the ensemble refuses the connection (or cannot be
// dialled), rather than waiting out connect_timeout.
//
// Passwords never appear in errors.
package zklock
