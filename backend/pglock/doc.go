// Package pglock is dlock's PostgreSQL backend: a lock in the database you
// already run, with fencing tokens, leases judged by the server's clock, and
// waiters woken by LISTEN/NOTIFY.
//
//	import _ "github.com/dlock/dlock/backend/pglock"
//	c, err := dlock.Open(ctx, "postgres://app:secret@db:5432/app?sslmode=verify-full&table=locks")
//
// or, over a pool the program already has:
//
//	d, err := pglock.New(pool, pglock.WithTable("ops.locks"))
//	c := dlock.New(d)
//
// # How it works
//
// Each lock name has a row in a lease table (default "dlock_leases"; made
// on first use with CREATE … IF NOT EXISTS, or by Migrate): the name as
// bytea, stored and compared byte for byte, so any name — quotes, NUL
// bytes, 1024 bytes — is itself and nothing else; the owner key; the fencing
// token; the holder's metadata; expires_at. Every value from a caller is a
// bind parameter; the table's name is quoted as an identifier. The
// statements are in queries.go.
//
//   - Acquire is one statement: INSERT … ON CONFLICT (name) DO UPDATE … WHERE
//     the lease has expired (expires_at <= clock_timestamp()) RETURNING the
//     token. When the lock is held, the same statement returns the holder's
//     remaining TTL, which bounds the fallback poll.
//   - The token is nextval of a sequence, drawn while the statement holds
//     the name's row lock, so each grant's token is drawn after the previous
//     grant committed: tokens strictly increase per name. Rows are
//     therefore never deleted: release marks the row free (an empty
//     owner), so the next grant updates it. (An INSERT draws its token before the conflict check; if
//     rows were deleted, an insert that drew early and stalled could land
//     after a later grant with a smaller token.) Free rows cost a few dozen
//     bytes per name ever locked; deleting a free row is safe only while no
//     client acquires that name.
//   - Extend and Release are owner-checked (WHERE name = $1 AND owner = $2
//     AND expires_at > clock_timestamp()); Release also hands the lock to
//     the next waiter, or sends pg_notify, in the same statement,
//     delivered when it commits (see Waiting). So does Break, and so does
//     an acquire that took over an expired lease (waiters then re-arm
//     their timers on the new holder).
//   - A client holding many leases renews those that come due together
//     in batches (driver.BatchExtender): one owner-checked UPDATE … FROM
//     unnest(names, owners) of up to 256 leases of one TTL, which returns
//     those it renewed; session-held locks and semaphore permits are
//     renewed one by one. The conformance suite's
//     BatchRenewalRenewsEachLeaseAndReportsEachLoss checks that a batch
//     renews each live lease and refuses each released, expired or taken
//     one; BenchmarkRenewals measures the two ways side by side (6.8× the
//     renewals a second of one UPDATE each, 20,000 leases).
//   - Cost: a lock that is free and that nobody waits for is taken in one
//     statement and released in one, plain and fair, Lock and TryLock
//     alike (TestUncontendedLockIsOneStatementAndUnlockOne; the fast path
//     below). Contention costs more: a Lock of a lock that another holds
//     joins the queue in one more statement (the join, below); each later
//     attempt of a queued waiter is one round trip of four statements
//     (BEGIN, the name's row lock, the attempt, COMMIT).
//   - Waiting: a queue in the database, with hand-off on release (see
//     Waiting below), woken by LISTEN/NOTIFY on one LISTEN connection per
//     Driver, shared by all its waiters (not one per waiter). Should the
//     LISTEN connection break, the driver makes it again while its
//     waiters go on waiting (TestBrokenListenConnectionIsMadeAgain); so
//     too when the server ends its first one before it listens
//     (TestListenConnectionEndedWhileMadeIsMadeAgain).
//   - Grant.Recovered (for WithLockDelay) is true when the grant ended a
//     lease that was not released: expired, crashed or broken.
//
// # Waiting
//
// Waiting is a FIFO queue, for plain and fair locks alike: a Lock that
// does not get the lock at once puts an entry in a third table beside the
// lease table, named after it with "_waiters" appended (dlock_leases_waiters;
// made with the permits table), holding its place (drawn from the token
// sequence as it arrives), the lease it asks for, and a short lease of its
// own, the waiter TTL (WithWaiterTTL, default 2s). The difference between
// the modes is arrival: a plain Lock's first attempt takes a free lock
// whoever waits (as a plain TryLock does), as an unfair mutex lets an
// arriving goroutine do; with dlock.WithFair nobody passes a live waiter,
// not even to a lock that a Break or an expiry left free
// (TestFairTryLockDoesNotPassAQueuedWaiter), and grants go in arrival
// order (dlocktest's FairWaitersAreGrantedInArrivalOrder; the whole
// conformance suite also runs with WithFair, TestConformanceFair).
//
//   - The fast path: a Lock or TryLock of a mutex (or a writer's) first
//     runs one statement, outside the queue, that takes the lock only if
//     it is free, no reader holds a permit of the name and — unless it is
//     a plain Lock, which may pass waiters — nobody live is queued. Its
//     token is drawn from the sequence under the name's row lock, as
//     every grant's (TestFastPathTokenIsAboveEveryEarlierGrant). It reads
//     the queue and the permits as of the statement's start, and takes
//     the row lock after; so every transaction that changes the queue or
//     the permits under the row lock also writes the row, and the fast
//     path grants only if the row it locks is the version its snapshot
//     saw (TestFastPathSeesAWaiterQueuedWhileItRan). Otherwise — held,
//     someone queued, or the queue changed as it ran — it changes
//     nothing, and the caller joins the queue (or a fair TryLock asks the
//     queue), one more round trip (TestFairTryLockDoesNotPassAQueuedWaiter).
//     A Lock by a driver whose last release of that name handed the lock
//     to a waiter skips the fast path, which would find the lock held, and
//     goes to the queue at once (TestLockAfterItsHandOffGoesToTheQueueAtOnce):
//     a client that takes turns with others pays one statement for its
//     release and one to queue again. The driver remembers one name, the
//     last it handed on; a release of it that frees the lock forgets it.
//   - The join: when the lock is held by another (the fast path said so,
//     or the driver just handed it on), the first attempt is one
//     statement, not the four of the queue's transaction: it writes the
//     name's row (taking its lock, and telling the one-statement paths
//     that the queue may have changed) and joins the queue only if the
//     lease is still another owner's and live on the row's newest
//     version, as the server judges an UPDATE's condition again after it
//     waited for the row's lock (TestJoinIsJudgedOnTheRowsNewestVersion).
//     Otherwise it changes nothing, and the attempt under the row lock
//     follows, which takes a free lock as the fast path would.
//   - A release hands the lock over: in the statement that releases it,
//     it grants the lock to the first live waiter of the queue (a new
//     token, the waiter's TTL and metadata), takes it out of the queue and
//     tells it by NOTIFY on its driver's own channel — each Driver listens
//     on the table's channel and on one of its own, on the same LISTEN
//     connection — with the owner key and the token as payload. The
//     waiter then holds the lock without a statement of its own
//     (TestReleaseHandsTheLockToTheNextWaiter). The release is one
//     statement that reads the queue as of its start, under the same rule
//     as the fast path: if a waiter's attempt changed the name's row
//     meanwhile, it changes nothing and runs again under the row lock, in
//     one more round trip.
//   - A release with nobody queued, the common case, is cheaper: a lease
//     granted without the queue (by the fast path) is released first by
//     a statement that frees it only if the queue has no entry for the
//     name, under the same rule (TestReleaseSeesAWaiterQueuedWhileItRan),
//     and costs about what a plain owner-checked UPDATE does; the
//     hand-off's statement, which reads the first live waiter, costs
//     about 30% more (BenchmarkStatements). Otherwise it changes
//     nothing and the hand-off runs, one more round trip. A lease granted
//     from the queue, where others were waiting, goes straight to the
//     hand-off.
//   - The bell: a channel per driver, rather than one per name with the
//     owner in the payload, sends each hand-off to the one client that
//     waits for it: with several clients queued, each release is heard on
//     the LISTEN connection of the next waiter alone, and a hand-off sends
//     nothing on the table's channel (TestReleaseRingsOnlyTheNextWaitersBell,
//     TestReleaseHandsTheLockToTheNextWaiter). (The server itself, as of
//     PostgreSQL 15, still signals every backend that listens in the
//     database at each NOTIFY, whatever its channels: each listening
//     client costs every NOTIFY some server time, though only one is
//     told.)
//   - A waiter's attempt is one round trip: it grants the lock, or
//     renews the waiter's place; it runs when the table's channel says
//     the lock was freed without a hand-off (Break, a release with nobody
//     live queued), when the holder's lease would run out by the server's
//     clock, and every third of the waiter TTL as the heartbeat, so a
//     waiter keeps its place however long it waits
//     (TestWaiterKeepsItsPlaceWhileItWaits). A waiter whose context ends
//     leaves the queue before Lock returns
//     (TestCancelledWaiterLeavesTheQueueBeforeLockReturns).
//   - A waiter that stopped renewing its place (killed, frozen, cut off)
//     is passed over once its waiter TTL runs out, and a waiter whose
//     LISTEN connection is gone (its process died) at once: that
//     connection holds a session advisory lock named in the entry while
//     it lives, and a release tries a shared lock of it
//     (TestReleasePassesOverWaitersThatAreGone). An entry whose place ran
//     out is deleted by the next attempt of the name.
//   - Inspect lists the live waiters in arrival order (Info.Waiters).
//   - A role that may not use the waiters table (or the permits table,
//     which a writer's attempt reads) waits by retrying, as
//     before there was a queue: each release wakes all the name's waiters
//     and one of them wins; WithFair then fails with an error that says
//     what to grant (TestRoleWithoutCreateIsToldWhatToGrant).
//
// # Semaphores
//
// A semaphore (dlock's Client.Semaphore, driver.Request.Limit > 1) keeps
// its permits in a second table beside the lease table, named after it
// with "_permits" appended, in the same schema (dlock_leases_permits by
// default): one row per permit, with its owner, token, holder and
// expires_at. It is made with the lease table, and beside a lease table
// made by an older version on first use (or by Migrate)
// (TestTableOfAnOlderVersionGainsPermits). A role that may not make or
// use it keeps its mutexes, Inspect, List and Break, and a semaphore
// tells it what to run and grant; once granted, the same driver uses it
// (TestRoleWithoutCreateIsToldWhatToGrant).
//
//   - A permit is granted in one round trip of two statements in one
//     transaction: the first locks the name's row of the lease table (made
//     free if the name has none), the second counts the permits live by
//     the server's clock and, if fewer than the request's limit, inserts
//     one with a token drawn from the sequence. The second statement
//     starts after the lock is held, so it sees every permit granted
//     before; one statement would count as of before it waited, and grant
//     too many (TestPermitGrantsQueuedOnTheNameCountEachOther). Each
//     client judges by its own limit: holders above a lowered limit keep
//     their permits.
//   - Tokens of one name increase in grant order across its permits: each
//     is drawn under the name's row lock, as a mutex's is.
//   - Expiry, Extend and Release are as for a lease, by the server's clock
//     and checked by owner; Release deletes the permit and notifies on the
//     table's channel. A waiter retries when woken, when the soonest live
//     permit's TTL runs out (so a crashed holder's permit is taken within
//     its TTL), and on the safety poll.
//   - Inspect and List report a semaphore's live permits in grant order
//     (Info.Permits), in the same round trip as the lease table. Break
//     ends every permit of the name.
//   - Grant.Recovered is true when the permit fits only because permits
//     ended without a release (expired, crashed or broken): such a permit
//     stays, expired, until a grant needs its place
//     (TestPermitGrantReportsTakeoverOfUnreleasedPermits).
//   - With dlock.WithFair, a permit is granted only while the permits
//     live and the live waiters queued ahead of the caller are fewer than
//     its limit, so permits go in arrival order; a waiter that is not
//     granted keeps a place in the queue as a mutex's waiter does. There
//     is no hand-off: a release wakes the waiters on the table's channel,
//     and they try in turn (TestFairSemaphoreServesItsQueueFirst). A plain
//     Acquire takes a free permit whoever waits.
//   - Session locks (mode=session) have no semaphores: asking for more
//     than one permit is dlock.ErrUnsupported.
//
// # Read-write locks
//
// A read-write lock (dlock's Client.RWMutex; driver.Request.Shared marks a
// reader) uses the tables above and nothing more: a reader holds a permit
// of the permits table, a writer holds the name's lease, and both wait in
// the one queue and draw their tokens from the one sequence, each under
// the name's row lock, so tokens increase in grant order across readers
// and writers: a writer's token is above every reader's granted before
// it, and every later reader's above the writer's. A writer's request is
// a fair mutex's (the portable layer asks for read-write locks with
// WithFair); what makes it a writer's is that its grant also wants no
// live permit of the name. Capabilities().RWMutex is true in lease mode.
//
//   - A reader is granted, in one round trip as a fair semaphore's permit
//     (the same statement, with its own rule), while no writer holds the
//     lease and no live writer is queued ahead of it; readers queued
//     ahead of it are no obstacle: they are granted beside it. A reader
//     that is not queued yet has every live waiter ahead, so a reader
//     never passes a waiting writer, not even on its first attempt nor
//     when asked without WithFair (dlocktest's
//     RWMutexTryRLockDoesNotPassAWaitingWriter and
//     RWMutexWriterIsNotStarvedByReaders; TestRWReaderNeverPassesAWaitingWriter).
//   - A writer is granted while the lease is free, no reader's permit is
//     live and it is first among the live waiters; readers and writers
//     hold apart (RWMutexReadersShareAndWritersHoldAlone, which also
//     checks the tokens' order).
//   - Wake-ups: a writer's release hands the lease to the next waiter only
//     if that is a writer. When it is a reader, the release frees the
//     lock and the table's channel wakes the waiters: the readers up to
//     the first writer are granted together, each in its own attempt, and
//     the writer behind them when they have released
//     (TestRWWriterReleaseWakesTheReadersQueuedBehindIt). A reader's
//     release wakes the waiters as a permit's does. A writer that gives
//     up while readers hold leaves the queue and wakes the readers it held
//     back (TestRWCancelledWriterWakesTheReaderBehindIt,
//     RWMutexCancelledWriterLeavesNothingBehind); a reader that gives up
//     leaves the queue and gives back a permit its last attempt was
//     granted (TestRWCancelledReaderLeavesNothingBehind).
//   - A crashed reader's permit expires with its TTL; a waiting writer
//     looks again when the last live reader's lease would run out
//     (RWMutexCrashedReaderFreesLockWithinTTL).
//   - Inspect shows the readers as Info.Permits, in grant order
//     (RWMutexInspectShowsEveryReader; List reports them as a semaphore's
//     permits), and the live waiters, readers and writers alike, in
//     Info.Waiters (TestRWWriterReleaseWakesTheReadersQueuedBehindIt).
//     Break ends the writer's lease and every reader's; the waiters are
//     woken (TestRWBreakFreesEveryReader).
//   - Which waiter is a reader the queue learns from its holder metadata,
//     as written by dlock's portable layer (driver.HolderShared), which
//     the entry keeps: a caller of the driver itself that sets
//     Request.Shared should write it too, and ask for a writer's lease
//     with Request.Fair, as the portable layer does.
//   - Grant.Recovered of a reader is false: the readers' permits it finds
//     expired (and deletes) excluded no reader (TestRWBreakFreesEveryReader).
//     It is false too for a reader granted after a writer's lease ran out,
//     so dlock.WithLockDelay does not hold that reader back: a writer that
//     still acts on its lost lease is refused only by fencing (its token is
//     below the reader's).
//   - Session locks (mode=session) have no read-write locks: a reader's
//     request is dlock.ErrUnsupported (dlocktest's
//     RWMutexIsUnsupportedAndSaysSo in TestConformanceSessionLocks).
//
// # Guarantees
//
// Clock: expiry is decided by the server's clock alone (clock_timestamp(),
// not now(), which is the transaction's start). The client sends only
// durations and measures its own deadline on its monotonic clock from the
// send time of its last confirmed renewal; the two clocks need only tick at
// nearly the same rate.
//
// Fencing durability: a sequence is not transactional — a value once drawn
// is never handed out again, even by a transaction that rolls back — and
// PostgreSQL WAL-logs it ahead (32 values at a time), so after crash
// recovery it resumes at or above every value whose WAL record reached
// disk, skipping up to 32. A grant returns its token only after its
// statement committed, and with synchronous_commit=on and fsync=on (the
// defaults) the commit flushes the WAL up to and including the sequence's
// record. Hence every token a client has received survives a crash of the
// server, and later tokens are higher. This does not hold with
// synchronous_commit=off (a crash can lose the last commits, grant and
// sequence advance together, after their tokens were handed out), nor
// across a failover to an asynchronous standby that had not received the
// WAL; nor if the sequence is reset by hand (setval, or dropping it).
// Dropping the table leaves the sequence, on purpose: tokens go on
// increasing once it is created again (TestDroppedTableKeepsTokensIncreasing).
//
// Crash of a holder: its lease expires after its TTL by the server's clock
// (at once for session locks, below). Partition: the holder cannot renew;
// its Lease.Done closes when its own deadline passes, which is before the
// server's TTL runs out, so it knows before anyone else is granted the lock.
// Server restart: the table and sequence are durable; leases whose TTL ran
// out during the downtime are granted anew, others remain held and their
// holders renew them once the server is back (or declare them lost, if the
// downtime outlasted their deadline); tokens keep increasing
// (TestServerRestartWithinTTLKeepsTheLock, TestServerCrashWhileLocksAreHeld).
//
// Isolation: the statements are written for READ COMMITTED, PostgreSQL's
// default, and work on a server, database, role or pool whose sessions
// default to REPEATABLE READ or SERIALIZABLE too. The queue's transactions
// ask for READ COMMITTED; a statement that runs alone and fails with a
// serialization failure (which it does there when the name's row changed
// as it waited for its lock) changed nothing, and runs again, once, in a
// READ COMMITTED transaction of its own: one more round trip, only then.
// So do a renewal, which would otherwise lose a lease still held, and a
// session lock's release with its advisory unlock (each test below runs
// at the three levels: TestFastPathSeesAWaiterQueuedWhileItRan,
// TestReleaseSeesAWaiterQueuedWhileItRan,
// TestRenewalThatWaitedForTheRowsLock,
// TestSessionReleaseThatWaitedForTheRowsLock,
// TestPermitGrantsQueuedOnTheNameCountEachOther; and at the two others,
// TestContendedLocksOnARepeatableReadServer).
//
// A server that does not answer (frozen, or cut off while the connection
// stays open) never makes a call hang: each operation's statements are
// bounded by the driver's operation timeout (WithOpTimeout, URL
// op_timeout, default 10s), and an operation that runs out of it while
// the caller's context is live fails with an error wrapping
// dlock.ErrUnavailable and context.DeadlineExceeded. A session lock that
// waits in the server's lock queue does so in slices of that timeout (the
// connection's lock_timeout), queueing again after each, so a server that
// stops answering is noticed there too; a waiter may lose its place in the
// queue at the end of a slice (session locks make no FIFO promise).
//
// # Session locks
//
// WithSessionLocks (URL: mode=session) holds each lock as a session-level
// advisory lock, pg_advisory_lock(key) with key a 64-bit hash of the
// table's schema-qualified name and the lock's name, on a connection of
// its own — for users who want a lock
// freed the instant its holder's connection dies (a killed process frees
// it at once, not after a TTL). The fencing token still comes from the
// table's sequence: after taking the advisory lock the holder writes the
// name's row. It takes over another session holder's live row only when
// that row's own advisory key is held by no session (its holder's session
// has ended); a row whose key is still held is left alone. The key hashes
// the table's schema-qualified name as the server resolves it, so clients
// that spell one table differently ("dlock_leases", "public.dlock_leases")
// take the same advisory lock and listen on the same channel. The
// trade-offs:
//
//   - One connection per held lock, and per waiter (waiters wait in the
//     server's lock queue, in pg_advisory_lock). Count them against
//     max_connections. A released lock's connection, holding nothing, is
//     kept for reuse (up to 4 per driver); beyond that each lock opens a
//     connection, which costs far more than the two statements of a lease.
//     Taking a session lock is one round trip for the advisory lock and
//     one for the row; releasing it, one.
//   - The server frees the lock when the connection ends, before the holder
//     can know. The holder watches its idle connection (a non-blocking peek
//     every 100ms) and fires Lost as soon as the server has closed it or
//     sent the error that precedes the close; at the latest it learns at
//     its next renewal (every TTL/3), which pings the connection with an
//     owner-checked UPDATE of the row. So after a connection cut another
//     client may be granted the lock a moment before the old holder's Done
//     closes: the fencing token is the defence, as always.
//   - A silent partition does not end the connection at once; the server
//     ends it by idle_session_timeout, which is set to the TTL on the lock's
//     connection, while the holder declares the loss at its own deadline,
//     before that. Requires PostgreSQL 14 or later (idle_session_timeout,
//     client_connection_check_interval).
//   - Two names whose 64-bit keys collide exclude each other (a chance of
//     about n²/2⁶⁵ among n names); their rows and tokens stay distinct.
//   - Lease-mode and session-mode clients may share a table: each respects
//     the other's live row; a session lock that crashed keeps lease-mode
//     clients waiting until its row's TTL runs out.
//   - No fair waiting: the server's lock queue makes no FIFO promise
//     across the slices of a wait, so Capabilities().Fair is false and
//     dlock.WithFair is ErrUnsupported (TestSessionLocksRefuseFairWaiting).
//
// # URL
//
// postgres:// or postgresql://, as libpq and pgx read it:
// postgres://user:password@host:port/database?param=value. pglock's own
// parameters are table ("name" or "schema.name", default dlock_leases; the
// token sequence is NAME_token_seq, the permits table NAME_permits, the
// waiters table NAME_waiters, the NOTIFY channel dlock_ followed by a hash
// of the table's schema-qualified name, and each driver's own channel that
// followed by _ and 16 random hex digits), mode (lease, the default,
// or session) and op_timeout (default 10s; see Guarantees). The others
// are pgx's: sslmode, sslrootcert, sslcert, sslkey, connect_timeout,
// pool_max_conns, …, and the server settings application_name,
// search_path and options (-c name=value, for any other setting). All are
// in the README's table of URL parameters,
// https://github.com/dlock/dlock#url-parameters; any other parameter is an
// error that names it. Passwords never appear in errors: dlock.Open masks
// the user-info password and the values of password= and sslpassword=.
//
// # Privileges
//
// Creating the table needs CREATE on its schema (which PostgreSQL 15 and
// later no longer grant to every role on "public"). A role without it gets
// an error (wrapping dlock.ErrUnavailable) that names the table and the
// grants: run Migrate once as the schema's owner, then GRANT SELECT,
// INSERT, UPDATE, DELETE ON the table and USAGE ON the sequence to the
// locking role, and SELECT, INSERT, UPDATE, DELETE ON the permits table
// (NAME_permits) for semaphores and readers and on the waiters table
// (NAME_waiters) for the queue; the queue needs both, as a waiting
// writer reads the permits table. Break of a session lock terminates the
// holder's backend, which needs the same role or pg_signal_backend.
package pglock
