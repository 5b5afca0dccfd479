// Package etcdlock is dlock's etcd backend.
//
//	import _ "github.com/dlock/dlock/backend/etcdlock"
//	c, err := dlock.Open(ctx, "etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379")
//
// or, over a client you already have: d, err := etcdlock.New(cli), then
// dlock.New(d).
//
// # Algorithm
//
// It is the algorithm of etcd's own concurrency.Mutex, with one lease per
// grant. Acquire grants a lease of the requested TTL (rounded up to whole
// seconds) and, in one transaction, reads the newest key under the lock's
// prefix and puts its own key after it, attached to that lease. The key
// with the lowest create revision holds the lock; the others wait in the
// order they arrived, so waiting is always fair (FIFO). The key the
// transaction read is the one just ahead (none: the lock is ours), and a
// waiter watches only that key, so a release reaches one waiter, not the
// whole queue (TestWaitersWatchOnlyTheKeyAhead); that waiter then reads its
// local member (no raft round trip) to find nothing left ahead and its own
// key still there (TestWaiterWhoseEntryWasDeletedIsNotGranted). The
// watches start at the server's current revision, so etcd pushes the event
// the moment the release commits (see watch.go for why concurrency.Mutex
// is slower there), and all waiters' watches of a driver share one gRPC
// stream. A contended grant therefore costs its client one transaction,
// one watch and one read (and one more read when a write lands between
// the transaction and the watch's start, to see whether the key ahead went
// meanwhile), and its release one delete
// (TestContendedGrantCostsATxnAWatchAndOneRead); a hand-off waits for the
// release's commit, one watch event and one local read. A waiter keeps its lease alive while it waits
// (TestWaiterKeepsItsPlaceLongerThanItsTTL), and a waiter that gives up
// (its context ends) deletes its key (TestQueueHoldsOnlyLiveEntries),
// which wakes the waiter behind it to watch the next key ahead.
//
// TryLock puts its key only if the queue is empty, so a failed attempt
// leaves nothing behind. Release deletes the key if it is still there (it
// is named by the lease, so it is ours or gone; see keys.go) and keeps the
// lease for the next acquire, which saves two writes per lock and unlock;
// an idle lease has no keys and simply expires. Extend renews the lease and checks that the key is still ours.
// Renewals that come due together go out in batches (driver.BatchExtender):
// the keep-alives of up to 256 leases on one lease stream, and the reads
// of their keys in read-only transactions of 128 (etcd's default
// --max-txn-ops), where Extend opens a keep-alive stream per lease
// (BenchmarkRenewals: 5.8× the renewals a second, 20,000 leases; the
// conformance suite's BatchRenewalRenewsEachLeaseAndReportsEachLoss).
// Break deletes the holder's key; the holder learns from a watch on its own
// key (Grant.Lost) before its next renewal
// (TestBreakIsNoticedByTheHolderAtOnce), and at the latest at that renewal.
// The watch of a lock held longer than 50 ms (from its grant: a waiter's
// own key is not watched while it waits, the read after each deletion
// ahead checks it; TestWaiterWatchesItsOwnKeyFromItsGrantOn) starts from
// the key's creation, so it misses nothing, even a deletion while the client's
// connection is down that a compaction has erased from etcd's history
// before it comes back: the key is then read instead
// (TestDeletionWhileTheWatchIsDownIsReported). A client watches all its
// held keys on one gRPC stream of its own, read by one goroutine, so a
// held lock costs no goroutine (TestHeldLocksAreWatchedWithoutAGoroutineEach),
// and the client receives the deletions of its own keys only, however
// busy the prefix is.
//
// # Semaphores
//
// A semaphore of n permits (dlock's Client.Semaphore) uses the same queue
// of keys with one rule changed: a key holds while fewer than n keys are
// ahead of it (and every key ahead holds, which matters only when clients
// disagree on n). A reader of a read-write lock (Client.RWMutex) holds
// while no writer's key is ahead of it; a writer is a mutex's key, so
// readers that come after a waiting writer wait behind it. The transaction
// that puts the key also reads the head of the queue (a semaphore's first n
// keys, a reader's whole queue), so a free permit costs one round trip, as
// a free lock does. Keys only leave the part of the queue ahead of a key,
// so the holders are always the oldest keys, a holder keeps its permit
// until its key goes, and permits are granted in create-revision order:
// tokens (create revisions) increase in grant order across all permits, and
// waiting is FIFO. A waiter watches the whole queue for deletions, not only
// the key ahead, since any deletion ahead of it may free its permit: a
// release wakes every waiter of the semaphore or read-write lock, for one
// local read each. TryAcquire puts its key and takes it back when it is not
// among the first n. Each client counts with its own n (the key's value
// records it, and Inspect reads it back to tell holders from waiters), so a
// limit lowered while permits are held lets no one in until fewer than the
// new n are held. Break deletes every holder's key in one transaction. All
// of this is checked by dlocktest's semaphore and read-write tests
// (TestConformanceSingleNode); compat=etcdctl has neither (ErrUnsupported:
// etcd's recipe has none).
//
// # Guarantees
//
// Fencing token: the create revision of the holder's key. etcd's revision
// is one counter for the whole cluster, persisted in its raft log, so
// tokens strictly increase across releases, expiry, Break, restarts of any
// or all members and leader changes (unless the cluster is restored from an
// older backup).
//
// Clocks: the lease TTL runs on the etcd leader's clock, from when a grant
// or keepalive reaches it. The client counts its own deadline on its
// monotonic clock from the send time of the last confirmed keepalive, so it
// declares the lease lost before the server lets it expire, as long as the
// two clocks run at nearly the same rate; they need not agree on the time.
// When leadership changes, etcd extends every lease by an election timeout,
// so a lease may last longer than its TTL on the server, never shorter.
// etcd grants no lease shorter than 1.5 election timeouts (2 s with the
// default 1 s timeout); Grant.TTL reports the TTL etcd granted.
//
// Crash: a holder that dies stops sending keepalives; its lease expires
// after the TTL (etcd checks expiry every 500 ms) and its key goes with it,
// which wakes the next waiter.
//
// Partition: a client cut off from a quorum cannot renew; its lease is lost
// on its side (Done closes) when its deadline passes, before the cluster's
// majority lets the lease expire and grants the lock to another (dlocktest's
// PartitionedHolderSeesLossBeforeOthersAcquire).
//
// Member partition: when one member of three is cut off from the two
// others while its clients still reach it — a follower, or the leader — a
// holder whose client talks only to that member cannot renew through it:
// its Done closes, Err wrapping ErrLeaseLost, before a client of the two
// others waiting on the lock is granted it, with a higher token
// (TestFollowerCutFromLeaderLosesLeaseBeforeNextGrant,
// TestLeaderCutFromFollowersLosesLeaseBeforeNextGrant). That waiter keeps
// its place through the election that follows the leader's cut: each
// keepalive of a waiting lease is bounded by a third of its TTL and
// retried, so one that hangs on a member without a leader does not let
// the lease lapse.
//
// Server restart: leases survive in etcd's database, and etcd gives each
// one a full TTL again once a leader is elected, so a holder that reconnects
// within the TTL keeps its lock, with its token
// (TestServerRestartWithinTTLKeepsTheLock, whose server stays down across a
// failed renewal).
//
// Lock-delay: not reported (Capabilities.LockDelay is false, so the
// portable layer applies WithLockDelay after every grant): telling a
// release from an expiry would cost a marker write and read on the hand-off
// path.
//
// # Keys
//
// Every key lives under a prefix (default "dlock/"): the lock name, escaped
// so that any name of 1..1024 bytes is a distinct key prefix (see keys.go),
// then "/" and the ID of the acquirer's lease in 16 hex digits, as
// concurrency.Mutex names its keys, holding the holder's metadata as its
// value:
//
//	dlock/orders%2F42/694d7f3a0c1b2e45	{"host":"web-1","pid":4242,…}
//
// A lease carries one acquire at a time, and a client that locks a name
// again writes the same key again: etcd keeps every deleted key in its
// index until the next compaction, and each acquire's read of the queue
// walks the name's deleted keys too, so a new key name per lock would make
// a name locked often slower and slower between compactions.
//
// List reads all locks whose names start with a prefix with one range read.
//
// # Compat mode: compat=etcdctl
//
// With compat=etcdctl in the URL (WithCompat("etcdctl")), the lock name is
// the name given to "etcdctl lock NAME" and to concurrency.NewMutex(session,
// NAME), verbatim, and dlock's keys are the ones concurrency.Mutex writes:
// NAME/ and the contender's lease ID in lower-case hex, attached to that
// lease, one key per lease (a driver's lease carries one acquire at a
// time):
//
//	orders/42/694d7f3a0c1b2e45	{"host":"web-1","pid":4242,…}   dlock
//	orders/42/35fa24534d3e803	(empty)                         etcdctl lock, concurrency.Mutex
//
// The prefix does not apply (giving both is an error), and no name is
// escaped. Both kinds queue under NAME/ in create-revision order: the
// oldest key holds, and each waiter, of either kind, watches the key just
// ahead of its own (TestDlockAndEtcdctlExcludeEachOther). As with etcdctl,
// the queue of NAME is every key under NAME/, so while "jobs/a" is held
// "jobs" is too (TestEtcdctlCompatNestedNamesShareTheOuterQueue). Among
// its own clients dlock keeps its whole contract in this layout
// (TestConformanceEtcdctlCompat). In a mixed fleet, point by point:
//
//   - Mutual exclusion: among all clients of either kind
//     (TestMixedFleetWithEtcdctlAndMutexLosesNoIncrement: 2 dlock
//     processes, 2 etcdctl lock loops and 2 concurrency.Mutex processes,
//     500 read–sleep–write increments, none lost, the lock passing between
//     dlock and the others at least 100 times: 224 to 372 in our runs).
//   - Order: one FIFO queue for both kinds; WithFair holds across them.
//   - Fencing token: dlock's is its key's create revision, as in its own
//     layout, and a foreign grant's key has one of the same sequence: the
//     create revisions of all grants, of either kind, strictly increase in
//     grant order (the same test checks every turn). The foreign clients
//     are not handed theirs. etcdctl lock gives its command ETCD_LOCK_KEY
//     and ETCD_LOCK_REV, and concurrency.Mutex has Key and Header; but
//     ETCD_LOCK_REV and Header().Revision are the revision of the response
//     that granted the lock, which is the key's create revision only when
//     the lock was free at once: after a wait they are the revision of the
//     read that found it free, which can exceed the token of a dlock
//     waiter queued meanwhile, so a resource that took them as tokens
//     would refuse that holder's writes (the test requires an etcdctl
//     turn with ETCD_LOCK_REV past its key's create revision, and one with
//     it at or past the token of the dlock holder after it: in our runs,
//     99 and 28 to 45 of 100 turns). The token is the create revision of
//     the key: etcdctl get "$ETCD_LOCK_KEY" -w json (create_revision), or
//     Get(m.Key()) after Lock; for writes to etcd itself, a transaction
//     guarded by m.IsOwner().
//   - Renewal and loss notice: dlock's are as in its own layout. etcdctl
//     lock keeps its session lease (--ttl, default 10s) alive while the
//     process lives. With a command, it watches neither its lease nor its
//     key: the command runs on, unsignalled, after a lost lease or a
//     Break, and an etcdctl killed with SIGKILL leaves its command running
//     while its lease expires. Without a command it exits when its session
//     ends, not when its key is deleted. concurrency.Mutex's Session.Done
//     closes when no keepalive has been answered for the TTL, counted from
//     the last answer's arrival and checked once a second: at or after the
//     moment etcd may expire the lease and grant the lock to another, not
//     before; a deleted key goes unnoticed. (etcd 3.4's Mutex, which
//     etcdctl 3.4 uses, does not check after a wait that its own key is
//     still there; later versions do.)
//   - Crash of a holder: either kind's lock frees when its lease expires,
//     after dlock's TTL or etcdctl's --ttl
//     (TestKilledEtcdctlHolderFreesLockForDlockWaiter).
//   - Inspect, List, Break: a foreign contender is shown with no host or
//     PID, a note naming its lease and key, its key's create revision as
//     the token, and its lease's remaining TTL as the expiry. List PREFIX
//     reads the names of the keys under PREFIX (with no prefix, of every
//     key in the cluster) and keeps those of concurrency.Mutex's layout
//     (NAME/ and the hex ID of the key's own lease). Break deletes the
//     holder's key, whichever kind wrote it; a foreign holder is not told
//     (see above), so the next holder can run beside it.
//
// # URLs
//
//	etcd://[user:password@]host1:2379[,host2:2379…][?param=value&…]
//	etcds://…   (TLS)
//
// A host without a port gets port 2379 (with several hosts, give each its
// port). The parameters — prefix (default "dlock/"; clients with different
// prefixes do not see each other's locks), compat (etcdctl: see Compat
// mode), connect_timeout (default 5s), tls
// (implied by etcds:// and by any of ca, cert, key, server_name,
// skip_verify) and those TLS parameters — are described in the README's
// table of URL parameters:
// https://github.com/dlock/dlock#url-parameters.
//
// user and password are etcd's authentication (etcdctl user add); they are
// never printed: errors show the URL with the password replaced.
//
// This package is etcd's client side only: its module requires etcd's
// client, not its server. The etcd server that "dlock dev" runs, and the
// CLI's demo and bench by default, lives in the CLI's module.
package etcdlock
