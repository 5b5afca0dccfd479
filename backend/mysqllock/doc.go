// Package mysqllock is the MySQL and MariaDB backend of dlock: a lease table
// in a database you already run, with fencing tokens and a server-side wait.
//
//	c, err := dlock.Open(ctx, "mysql://user:pass@db.example:3306/app")
//	// or, with your *sql.DB: d, err := mysqllock.New(db); c := dlock.New(d)
//
// # Mechanism
//
// Each lock is a row of the lease table (default dlock_leases, created on
// first use or by Migrate): the name as VARBINARY(1024) primary key — any
// name is stored and compared byte for byte — the owner key, the holder
// metadata, the fencing token, and expires_at by the server's clock.
//
// Acquire is one INSERT … ON DUPLICATE KEY UPDATE, one round trip: it
// inserts a new row, or takes over a row whose lease is released or has
// expired (expires_at <= UTC_TIMESTAMP(6)), incrementing the row's token in
// the same statement, or leaves a live lease alone. The statement reports
// its outcome — granted with this token, or held for this much longer —
// through LAST_INSERT_ID(expr), which the server returns in the OK packet.
// Extend and Release are one owner-checked UPDATE each (Release also
// reports, through LAST_INSERT_ID(expr), whether someone waits); Break
// expires the lease whoever holds it.
//
// A client holding many leases renews those that come due together in
// batches (driver.BatchExtender): one owner-checked UPDATE of up to 256
// leases of one TTL, and, only when it renewed fewer than it was given, a
// SELECT of those it renewed; semaphore permits are renewed one by one.
// The conformance suite's BatchRenewalRenewsEachLeaseAndReportsEachLoss
// checks that a batch renews each live lease and refuses each released,
// expired or taken one; BenchmarkRenewals measures the two ways side by
// side (17.7× the renewals a second of one UPDATE each, 20,000 leases).
//
// # Waiting: bells
//
// A waiter does not poll the table at a fixed interval. Every Driver keeps
// one connection, its bell connection, on which it holds a MySQL user-level
// lock (GET_LOCK) named after each lock it holds — the lock's bell — once
// someone waits for it or it has been held for 5 ms (see Costs), and writes
// that connection's id into the lease row. A waiter blocks in
// GET_LOCK(bell, timeout) on a session of its own, so the server wakes it
// the moment the bell is released: when the holder releases the lease, when
// its lease is lost, or when its process or connection dies (the server
// drops a dead session's user locks). The waiter gives the bell straight
// back, in the same statement, and tries to acquire.
//
// Costs. Holding bells costs one connection per Driver, not one per held
// lock: a session may hold many user locks (MySQL 5.7+, MariaDB 10.0+).
// But on MariaDB a GET_LOCK takes time in proportion to the user locks its
// session already holds (BenchmarkGetLockCostByLocksHeld: 10 µs with none
// held, 14 µs with 1,000, 161 µs with 10,000, 979 µs with 40,000), so a
// Driver holds at most 1,024 bells of leases that nobody waited for at
// their grant (testQuietBellsAreBounded). Past that bound such a lease
// gets no bell, and a waiter that comes while it is held looks with
// back-off from 5 ms to 1 s, as for a holder without a bell; a grant that
// found someone waiting takes its bell whatever the bound
// (testWaitedGrantTakesBellPastTheQuietBound). The keeper's rounds look at
// the bells held and the claims that changed since the last; the room a
// released bell leaves is given to another held lock at its look at every
// claim, every 20 s (testQuietBellsAreBounded), so that a round costs
// what changed, not what is held.
// Bells are taken and dropped by a background goroutine after the row
// changed, so they add no round trip to Acquire or Release (a fair
// release drops its bell in its own statement: see Fair waiting). A mutex's
// grant takes its bell at once only if its statement found someone waiting
// (a held waiting slot, below; testGrantWithWaitersTakesBellAtOnce), and
// otherwise 5 ms after the grant (testHeldLockTakesBellSoon; a semaphore
// permit's, at once), so a Lock+Unlock that nobody waits for and that ends
// sooner sends two statements, the acquire and the release, and nothing on
// the bell connection (TestUncontendedLockSendsTwoStatements). A waiter
// that comes in those 5 ms finds the bell not yet taken and looks every
// 2 ms until it is. A waiting Lock uses no connection until an attempt has
// found the lock held; then it waits on a session of its own (sessions are
// reused while clean). Waiters of a lock that their own Driver holds wait
// in-process: that Driver's Release wakes them directly. Without
// WithFair, a release wakes every waiter of the lock (each tries once, one
// wins; with WithFair, see Fair waiting): about three
// statements per waiter per hand-off, however long the lock was held,
// where polling costs grow with the hold.
//
// Waiting slots and standing back. Each lock name has four waiting slots,
// user locks named "dlock:w" followed by driver.NameHash of the table and
// the lock name, and a digit. A waiter's wait statement takes a free slot,
// if one is left and it has none, and its session keeps it while the
// waiter waits; it is given back in the background as the Lock returns,
// granted or cancelled, or dropped by the server with the session
// (testReleaserStandsBack, testCancelledWaiterGivesSlotBack). The acquire
// and release statements look at the slots (IS_USED_LOCK, no extra round
// trip): a grant that finds one held takes its bell at once, and a release
// that finds one held makes that Driver's next Lock of the name stand back
// 3 ms before its first attempt (testReleaserStandsBack). Without it the
// releaser wins the free lock nearly every time — its statement reaches
// the server before the woken waiter's, which must first hear the bell —
// and the lock stays with one client while the others wait
// (BenchmarkMariaDBVsFloor/Contended8Hold1ms measures holder changes per
// grant). Standing back keeps the plain semantics (any contender may take
// a free lock; TryLock never stands back) and costs no statement.
//
// Bounds. A bell never outlives the lease by the holder's own clock: it is
// dropped at release, on a refused renewal, and when the lease's local
// deadline passes (TestLostLeaseGivesUpItsBell, testBellKept). A waiter's
// GET_LOCK is bounded by the holder's remaining lease (by the server's
// clock) and by a cap of 5 s, after which it looks again; the portable layer
// also retries at the holder's expiry and every couple of seconds. A waiter
// waits only on a bell held by the connection recorded in the row, so
// waiters passing a bell among themselves never wake each other. In the
// moment between a grant and the holder taking its bell the waiter looks
// every 2 ms; where a holder has no bell (a crashed holder whose lease still
// runs; a bell connection that failed or was stranded by a partition — its
// session ends by wait_timeout after 60 s) it polls with back-off from 5 ms
// to 1 s. Break wakes waiters when the broken holder's next renewal is
// refused (within a third of its TTL) or at their next look. A cancelled
// Lock ends its waiter's statement with KILL QUERY (a session may kill its
// own user's statements without extra privileges) and returns only once it
// has ended, so it leaves nothing behind on the server.
//
// Bell names are "dlock:" followed by driver.NameHash of the table and the
// lock name (38 characters; the limit is 64), so any name of up to 1024
// bytes maps to a bell; a collision would cost only a spurious wake-up,
// never exclusion.
//
// # Fair waiting
//
// With dlock.WithFair (Capabilities.Fair), waiters are granted in arrival
// order and nobody — Lock or TryLock — passes a live queued waiter
// (dlocktest's FairWaitersAreGrantedInArrivalOrder; the whole conformance
// suite also runs with WithFair, ConformanceFair). A third table, the
// queue, keeps one entry per waiting Lock: the lease table's name followed
// by "_waiters" (shortened with a hash as the permit table's name is),
// created with the others; fair waiting needs DELETE on it, which a
// waiter uses to remove its own entry.
//
//   - Acquire: a fair grant is the plain acquire statement with one more
//     condition, evaluated once in the same statement: no live entry is
//     queued ahead (for a request not queued: none at all). One round
//     trip; a fair TryLock never queues
//     (TestFairTryLockDoesNotPassAQueuedWaiter). A Lock whose first
//     attempt is refused takes a session of its own, takes its queue lock
//     on it — the user lock "dlock:q" followed by driver.NameHash of its
//     owner key — and inserts its entry in the same statement.
//   - Live: an entry counts while its expiry, by the server's clock, is
//     ahead — it lives for the request's TTL, but at least 3 s, and the
//     waiter renews it every third of that (TestFairWaiterKeepsItsPlace) —
//     and while the session recorded in
//     it holds its queue lock. A waiter whose process or connection dies
//     stops counting as soon as the server drops its session's user locks;
//     a stalled one, when its entry expires
//     (TestFairQueueSkipsAWaiterThatLeft, Crashed and Stalled: the next live
//     waiter is granted the very next token).
//   - Hand-off: a fair lease's release is one multi-table UPDATE that frees
//     the lease and, in the same statement, grants it to the queue's first
//     live entry — a new token, the waiter's TTL from now by the server's
//     clock, its holder metadata and its driver's bell connection — and
//     ends that entry. With nobody live queued it frees the lock as a
//     plain release does. The statement is sent on the driver's bell
//     connection and drops the holder's bell too (RELEASE_LOCK, evaluated
//     once the lease row has changed), so the first waiter wakes without
//     a second round trip (testFairHandOffDropsTheBellInTheRelease); while
//     that connection is busy with another statement, or there is none,
//     it goes on a pooled connection and the bell is dropped after it. A
//     waiter woken before the statement commits finds the lock not yet
//     its own and the holder's bell not taken, and looks again. A fair
//     lease whose bell is not taken yet — its grant found nobody else
//     queued, and it is released within the bell's 5 ms — is released by
//     the plain release statement, which does not read the queue
//     (TestUncontendedLockSendsTwoStatements): a waiter that queued
//     meanwhile is the first, finds the holder's bell not taken and looks
//     again every 200 µs (then less often), finds the lock free and takes
//     it, as nobody passes it (testFairReleaseBeforeTheBellKeepsTheOrder).
//     A waiter that takes the lock with its own attempt, as here, gives
//     up its queue lock before its Lock returns (one more statement): its
//     entry, which no hand-off ended, is then no longer live, so no
//     release hands the lock to it again
//     (testFairWaiterGrantedByItsOwnAttemptLeavesTheQueue).
//   - Wake-up: each queued waiter blocks in GET_LOCK on one user lock
//     only: the first live waiter on the holder's bell, every other one on
//     the queue lock of the live waiter just ahead of it, as ZooKeeper's
//     lock recipe watches only its predecessor. A hand-off rings the
//     holder's bell, which only the first waiter hears; the statement the
//     bell woke then reads the lease row again — a locking read, which
//     sees the newest committed row and waits for a release that rang
//     before it committed — finds the lock its own and reports it, with
//     its token; the waiter gives up its queue lock, which wakes the
//     second, which then waits on the new holder's bell
//     (TestFairReleaseWakesOnlyTheNextWaiter counts each waiter's
//     wake-ups). Statements per hand-off: the release, which drops the
//     holder's bell; the first waiter's queue lock given back and its
//     entry deleted (two, in the background); the new holder's bell
//     taken; the second waiter's new wait — five (more when the second
//     waiter finds the new holder's bell not taken yet and looks again
//     200 µs later, or the release went on a pooled connection), of which
//     only the release is between the old holder's Unlock and the new
//     holder knowing it holds the lock
//     (testFairHandOffDropsTheBellInTheRelease). The other waiters send only their wait again when it
//     runs out (each second) and their entry's renewal.
//   - Cancellation: a cancelled Lock ends its blocked statement with KILL
//     QUERY, deletes its entry and ends its session before it returns, and
//     then releases (handing on) a lease a release handed to it meanwhile:
//     once its entry is gone nothing can be handed to it
//     (TestFairCancelledWaiterLeavesBeforeLockReturns; dlocktest's
//     FairQueueSkipsWaiterThatGaveUp and
//     CancelledLockLeavesNothingBehind, run with WithFair).
//   - Plain requests do not look at the queue: a plain Lock or TryLock of
//     the same name may take a free lock that fair waiters wait for. Use
//     WithFair for every client of a name that should be fair.
//   - Semaphores with WithFair queue in the same table and are granted a
//     permit only while the live permits and the live waiters queued ahead
//     of them are fewer than their limit; nothing is handed off: a queued
//     waiter tries again when a permit's bell rings, this driver releases
//     a permit, or every second (the conformance suite's semaphore tests,
//     run with WithFair). Read-write locks: not offered
//     (Capabilities.RWMutex is false).
//   - Entries of waiters that crashed or stalled are ended by their
//     session's end or by the clock, and deleted, with its own, by the next
//     waiter of the name that leaves the queue
//     (testFairQueueSkipsAWaiterThatLeft counts the rows left).
//
// # Semaphores
//
// A semaphore of n permits (dlock's Semaphore; Capabilities.Semaphore) keeps
// its permits in a second table, created with the lease table: the lease
// table's name followed by "_permits" (dlock_leases_permits), or, where that
// would pass MySQL's 64 characters, the first 47 characters of the lease
// table's name, "_", 8 hex digits of its hash and "_permits". A lease table
// created before semaphores keeps working for mutexes without it (Inspect,
// List and Break find no permits); the first semaphore creates it, which
// needs CREATE, as the lease table did (or Migrate again;
// TestPermitTableNamesFitMySQL, testPermitsOnOldTable).
//
// A permit is a row with its own owner, token and expires_at, by the
// server's clock as for a mutex. A grant is one InnoDB transaction (five
// round trips; four for a refusal): it locks the name's row in the lease
// table and takes the next token from its counter — the mutex's counter,
// so tokens of one name increase in grant order across all permits and
// never repeat — counts the live permits with a locking read, and writes
// the permit only if fewer than the request's own n are live (so a holder
// above a lowered limit keeps its permit, and waits the lower-limit client
// out). An ended permit's row is reused by a later grant; a grant that takes
// the row of one that expired or was broken reports Recovered. Extend and
// Release act on the caller's own permit only; Break ends every permit of
// the name. The conformance suite checks the bound, tokens, Inspect's
// Permits, cancelled waits, the lowered limit, Break and a killed holder
// (freed within its TTL).
//
// Waiting: a session blocks on one user lock at a time, so a semaphore's
// waiter waits on the bell of one permit — each permit has a bell of its
// own — the live permit of another driver that expires first (renewed
// longest ago); its release, loss or holder's death wakes the waiter at
// once (testPermitBell: about 10 ms), and its expiry ends the wait. A
// release of another permit rings nothing that waiter hears: it is seen at
// the next look — after that ring or expiry, after the wait's cap (5 s), or
// at the portable layer's retry, every 1–2 s, which bounds it
// (testPermitReleasedUnwatched: about 2 s). This driver's own releases wake
// its waiters of the name in-process.
//
// # Guarantees
//
//   - Clock: expiry is judged by the database server's clock only
//     (UTC_TIMESTAMP(6), fixed per statement); a client's clock is never
//     compared with it. Clients need only a clock rate close to the
//     server's (see dlock's package doc).
//   - Fencing: the token is the row's counter, incremented by the statement
//     that grants the lease, in the same InnoDB transaction: it is as durable
//     as any committed row (innodb_flush_log_at_trx_commit=1, the default),
//     and strictly increases across release, expiry, Break and restarts. Do
//     not delete rows from the table: that restarts a name's counter.
//   - Fair waiting (WithFair): grants in arrival order among fair
//     requests, and no fair Lock or TryLock passes a live queued waiter
//     (FairWaitersAreGrantedInArrivalOrder,
//     TestFairTryLockDoesNotPassAQueuedWaiter). A queued waiter whose
//     session ended is skipped at once, one that stopped renewing its
//     entry once the entry expires: within the request's TTL, but at least
//     3 s (TestFairQueueSkipsAWaiterThatLeft). A waiter that stalls while
//     it is first may be handed the lock, which then runs out after that
//     waiter's TTL, as a crashed holder's does.
//   - Crash of a holder: its lease runs out after the TTL (no session ties a
//     lease to a connection); its waiters are woken at once by the bell and
//     acquire at expiry.
//   - Partition: the holder cannot renew, and its Lease.Done closes when the
//     last confirmed renewal's send time plus the TTL (less a drift margin)
//     passes — before the server lets anyone else take the lock.
//   - Restart of the server: committed rows survive. Leases that were due
//     when it stopped are granted anew with higher tokens; live leases stay
//     held and are renewed once the server is back (if within their TTL;
//     TestServerCrashWithinTTLKeepsTheLock, testCrashWhileHeld).
//     A server frozen or unreachable for longer than a lease: the holder's
//     Done has closed by then, and the lease is free when the server runs
//     again (its clock kept going).
//   - No hang: each operation's statements are bounded by the driver's
//     operation timeout (WithOpTimeout, URL op_timeout, default 10s); an
//     operation that runs out of it while the caller's context is live
//     fails with an error wrapping dlock.ErrUnavailable and
//     context.DeadlineExceeded.
//   - Replication: the guarantees are those of the one primary the driver
//     talks to. Failing over to an asynchronous replica that missed
//     committed grants can hand out a token again; use semi-synchronous
//     replication (or accept that) where failover happens.
//
// # MySQL and MariaDB
//
// Tested on MariaDB 10.11, with innodb_snapshot_isolation off and on, and
// with sessions defaulting to REPEATABLE READ (MariaDB's default), READ
// COMMITTED and SERIALIZABLE (TestOnOtherIsolationLevels); written to
// MySQL 8's documented semantics:
//
//   - ON DUPLICATE KEY UPDATE: MySQL 8.0.20+ deprecates VALUES(col) for a
//     row alias that MariaDB lacks; the statement passes the new values as
//     parameters instead and works on both.
//   - GET_LOCK: both allow many locks per session and names of up to 64
//     characters (MariaDB's limit is also 64). MySQL takes the timeout in
//     whole seconds, so the wait rounds the remaining lease up with CEIL.
//   - NOW(6)/UTC_TIMESTAMP(6): microsecond precision on both; DATETIME(6)
//     keeps microseconds. The statements use UTC_TIMESTAMP(6), so neither
//     the session time zone nor daylight saving time matters.
//   - LAST_INSERT_ID(expr) is reported in the OK packet on both, for a
//     table without AUTO_INCREMENT too.
//   - The fair release reads the queue's head in a derived table with
//     LIMIT, which both servers materialize, so the multi-table UPDATE may
//     also write the queue table (MySQL's error 1093 concerns subqueries
//     it merges). The fair acquire evaluates its queue condition once into
//     a user variable, which MySQL 8 accepts with a deprecation warning.
//   - A fair waiter's wait is a derived table with LIMIT, materialized
//     (its GET_LOCK done) before the outer query reads the lease row with
//     LOCK IN SHARE MODE, a clause that locks only the outer query's rows
//     (MySQL 8 documents that a locking clause does not reach into a
//     nested subquery), so no share lock is held while the wait blocks
//     (testFairHandOffDropsTheBellInTheRelease: one would stall the
//     release until the wait ran out).
//   - Snapshot isolation: the statements rely on InnoDB's locking reads,
//     which act on a row's newest committed version whatever the
//     statement's snapshot. MariaDB's innodb_snapshot_isolation (on by
//     default from 11.6.2, so in the 11.8 LTS) instead fails such a
//     statement with error 1020 ("Record has changed since last read")
//     when a row it locks changed after its snapshot, which under
//     contention is often. On a server that has the variable, every
//     statement runs with it off, for that statement alone (SET STATEMENT
//     innodb_snapshot_isolation=OFF FOR …); the session's setting is left
//     alone. The whole test suite of TestOnMariaDBServer runs on a server
//     with it on; without the prefix, its fair tests fail with error 1020.
//
// # URL
//
//		mysql://user:password@host:3306/database?table=dlock_leases&tls=true
//		mariadb://…  (the same)
//
//	  - table: the lease table's name, one identifier (quoted by the backend);
//	    default dlock_leases.
//	  - op_timeout: the bound of each operation's statements (default 10s).
//	  - tls: go-sql-driver/mysql's: true, false, skip-verify, preferred, or
//	    a name registered with mysql.RegisterTLSConfig. With true, or a
//	    registered configuration without ServerName, the server's
//	    certificate is verified against the URL's host.
//	  - go-sql-driver/mysql's other parameters (timeout, readTimeout, …).
//	    The driver would take any other name for a system variable to set;
//	    a URL does not, so that a misspelling is an error: set system
//	    variables in the DSN of your own *sql.DB and use New. The port
//	    defaults to 3306.
//
// The README's table of URL parameters lists them all:
// https://github.com/dlock/dlock#url-parameters.
//
// Passwords never appear in errors: dlock.Open masks the user-info
// password.
//
// # Privileges
//
// SELECT, INSERT and UPDATE on the tables (nothing is ever deleted from
// the lease and permit tables), and DELETE on the queue table for fair
// waiting;
// CREATE on the database to create them on first use (or have an
// administrator run Migrate, or the statements in the error message,
// once). Without CREATE, the first operation fails
// with an error wrapping dlock.ErrUnavailable that names the table, the
// missing privilege, and the GRANT to run.
package mysqllock
