package mysqllock

import (
	"fmt"
	"strings"
)

// The statements, in one place. {t} is replaced by the quoted table name;
// every value is a parameter of a server-side prepared statement, so lock
// names, owners and holder metadata never become SQL text.
//
// Time is always the server's: UTC_TIMESTAMP(6) is fixed for the duration
// of a statement (it is the statement's start), independent of the
// session's time_zone, and never jumps with daylight saving time as NOW(6)
// in a local zone would.

// createTable is the lease table. A row is never deleted: its token column
// is the lock's fencing counter, and deleting the row would restart it.
// owner is NULL when the lock was released; expires_at in the past (or the
// sentinel 1000-01-01 written by Release and Break) means it is free. bell
// is the connection id on which the holder keeps its wake-up lock.
const createTable = `CREATE TABLE IF NOT EXISTS {t} (
	name       VARBINARY(1024) NOT NULL,
	token      BIGINT UNSIGNED NOT NULL,
	owner      VARBINARY(64) NULL,
	holder     BLOB NULL,
	bell       BIGINT UNSIGNED NULL,
	expires_at DATETIME(6) NOT NULL,
	PRIMARY KEY (name)
) ENGINE=InnoDB`

// acquire grants the lock if it is new, released or expired, in one
// statement, and reports the outcome through LAST_INSERT_ID(expr), which
// the server returns in the statement's OK packet — no second round trip:
//
//	granted:     token<<3 | waited<<2 | recovered<<1 | 1   (odd)
//	not granted: remaining_microseconds<<1                 (even)
//
// recovered is 1 when the previous lease ended without a release (expired
// or broken: owner still set); waited is 1 when a waiter of another
// session holds one of the name's waiting slots ({waiting}), so that the
// new holder takes its bell at once. The ON DUPLICATE KEY UPDATE assignments run
// left to right and later ones see the earlier ones' results, so every
// condition tests expires_at, which is assigned last, and token is computed
// before owner changes. The new values are passed again as parameters
// rather than read with VALUES(col): MySQL 8.0.20 deprecates VALUES() there
// in favour of a row alias (INSERT … AS new), which MariaDB does not
// support; parameters work on both.
//
// Parameters: name, owner, holder, bell, ttl_us, the waiting slots' prefix
// (waitSlots times), then owner, holder, bell, ttl_us again.
const acquire = `INSERT INTO {t} (name, owner, token, holder, bell, expires_at)
VALUES (?, ?, LAST_INSERT_ID(9) >> 3, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
	token = IF(expires_at <= UTC_TIMESTAMP(6),
		LAST_INSERT_ID((token + 1) << 3 | ({waiting}) << 2 | (owner IS NOT NULL) << 1 | 1) >> 3,
		token + (LAST_INSERT_ID(GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), 0) << 1) & 0)),
	owner = IF(expires_at <= UTC_TIMESTAMP(6), ?, owner),
	holder = IF(expires_at <= UTC_TIMESTAMP(6), ?, holder),
	bell = IF(expires_at <= UTC_TIMESTAMP(6), ?, bell),
	expires_at = IF(expires_at <= UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, expires_at)`

// extend renews a live lease of owner, and records where its bell is now
// (the bell connection may have been replaced). Parameters: ttl_us, bell,
// name, owner.
const extend = `UPDATE {t} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, bell = ?
WHERE name = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)`

// release frees a live lease of owner; the token stays as the counter. It
// reports through LAST_INSERT_ID(expr) whether another session waits (1 +
// waited: 2 when a waiting slot is held), so that the releaser can stand
// back before it asks again. Parameters: the waiting slots' prefix
// (waitSlots times), name, owner.
const release = `UPDATE {t} SET owner = NULL, holder = IF(LAST_INSERT_ID(1 + ({waiting})), NULL, NULL),
	bell = NULL, expires_at = '1000-01-01 00:00:00'
WHERE name = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)`

// breakLease ends the live lease whoever holds it. The owner stays, so the
// next grant reports Recovered. Parameter: name.
const breakLease = `UPDATE {t} SET expires_at = '1000-01-01 00:00:00'
WHERE name = ? AND owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)`

// inspect reads one lock. Parameter: name.
const inspect = `SELECT token, holder, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
FROM {t} WHERE name = ? AND owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)`

// list reads the held locks whose names start with a prefix, compared as
// bytes (no LIKE, so '%' and '_' in a prefix mean themselves). Parameters:
// prefix, len(prefix), prefix.
const list = `SELECT name, token, holder, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
FROM {t} WHERE name >= ? AND LEFT(name, ?) = ? AND owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)
ORDER BY name`

// wait is a waiter's server-side wait for a release (see the package doc):
//
//	1  the lock is free or expired: try now
//	2  the holder kept its bell for the whole wait (its lease runs on)
//	3  the bell rang: the holder released it (or its connection died)
//	4  this driver holds it (its bell connection is ours): wait in-process
//	5  the lock is held and its bell is free: the holder's bell connection
//	   is about to take it (it does so just after the grant): look again soon
//	0  the lock is held and its holder has no bell: poll
//
// The wait is bounded by the holder's remaining lease, by the server's
// clock, and by a cap. A waiter that gets the bell gives it back in the
// same statement, so the next waiter and the next holder can take it.
//
// First, before it may block, the statement takes one of the name's
// waiting slots ({takeSlot}) unless its session holds one: the slot tells
// holders that someone waits (see acquire and release). The session keeps
// it until the waiter stops, and the server drops it with the session.
// The first column is the slot taken (0..waitSlots-1), -1 if the session
// had one, -2 if all were taken by other waiters.
//
// Parameters: whether the session holds a slot, the slots' prefix
// (waitSlots times), own bell connection id, bell, bell, cap_seconds, bell,
// bell, name.
const wait = `SELECT {takeSlot}, CASE
	WHEN l.owner IS NULL OR l.expires_at <= UTC_TIMESTAMP(6) THEN 1
	WHEN l.bell = ? THEN 4
	WHEN IS_USED_LOCK(?) = l.bell THEN 2 + COALESCE(
		GET_LOCK(?, LEAST(?, CEIL(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires_at) / 1000000)))
		AND RELEASE_LOCK(?), 0)
	WHEN l.bell IS NOT NULL AND IS_USED_LOCK(?) IS NULL THEN 5
	ELSE 0 END
FROM (SELECT 1) AS one LEFT JOIN {t} AS l ON l.name = ?`

// Semaphores (driver.Request.Limit > 1). {p} is the quoted permit table
// (permitTable). A semaphore's name has a row in the lease table too, but
// only for its token counter: that row stays free (owner NULL, expires_at
// the sentinel), and every permit grant of the name locks it, so grants of
// one name are serialized and take their tokens from the counter in grant
// order. Each live permit is a row of the permit table.
//
// A grant is one transaction: permitCounter (locks the row and takes the
// next token), permitCount (counts the live permits, and locks them all),
// then, if fewer than the request's limit are live, permitReuse (when an
// ended permit's row is there to take) or permitGrant, and COMMIT;
// otherwise ROLLBACK, which also gives the token back. Four round trips for
// a refusal (with BEGIN), five for a grant. Nothing is ever deleted, so the
// statements need no privilege beyond the mutex's (SELECT, INSERT, UPDATE).

// createPermits is the permit table. A row is one permit, live while
// expires_at is in the future. A row that has ended (released: owner NULL;
// expired or broken: owner still set) is taken over by a later grant of its
// name, with the new token as its key, so a name has as many rows as it
// ever had permits live at once. The name's token counter is in the lease
// table. bell is the holder's bell connection, as in the lease table; the
// permit's bell is permitBell of its token.
const createPermits = `CREATE TABLE IF NOT EXISTS {p} (
	name       VARBINARY(1024) NOT NULL,
	token      BIGINT UNSIGNED NOT NULL,
	owner      VARBINARY(64) NULL,
	holder     BLOB NULL,
	bell       BIGINT UNSIGNED NULL,
	expires_at DATETIME(6) NOT NULL,
	PRIMARY KEY (name, token)
) ENGINE=InnoDB`

// permitCounter locks the name's lease row, creating it free if it is new,
// and takes the next token through LAST_INSERT_ID(expr), reported in the OK
// packet. The row's lease columns are left alone. The exclusive row lock
// is held until the transaction ends: it serializes the grants of the name,
// so the count that follows cannot be raced, and the tokens are taken in
// grant order. A refusal rolls the increment back. Parameter: name.
const permitCounter = `INSERT INTO {t} (name, token, owner, holder, bell, expires_at)
VALUES (?, LAST_INSERT_ID(1), NULL, NULL, NULL, '1000-01-01 00:00:00')
ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)`

// permitCount counts the name's live permits, its ended ones, those of
// them that ended without a release (expired or broken: owner still set),
// and the time left on the live one that expires first (the caller's
// retryAfter). FOR UPDATE
// makes it a locking read of the newest committed rows (not a snapshot, at
// any isolation level), and holds them until the transaction ends: a
// renewal that commits just before cannot be missed, and no permit counted
// live is released or renewed in between (those wait for the commit). New
// permits of the name cannot appear: their grants wait for the lease row.
// Parameter: name.
const permitCount = `SELECT COALESCE(SUM(expires_at > UTC_TIMESTAMP(6)), 0), COALESCE(SUM(expires_at <= UTC_TIMESTAMP(6)), 0),
	COALESCE(SUM(expires_at <= UTC_TIMESTAMP(6) AND owner IS NOT NULL), 0),
	COALESCE(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), MIN(IF(expires_at > UTC_TIMESTAMP(6), expires_at, NULL))), 0)
FROM {p} WHERE name = ? FOR UPDATE`

// permitReuse writes the new permit over an ended one of the name (its
// holder's next renewal or release finds its token gone: ErrLeaseLost),
// one that ended without a release first: the grant then reports
// Recovered, as it takes that holder's place. Its lease starts by the
// server's clock now. Parameters: token, owner, holder, bell, ttl_us, name.
const permitReuse = `UPDATE {p} SET token = ?, owner = ?, holder = ?, bell = ?, expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE name = ? AND expires_at <= UTC_TIMESTAMP(6) ORDER BY owner IS NULL LIMIT 1`

// permitGrant writes the new permit in a new row, when the name has no
// ended one. Parameters: name, token, owner, holder, bell, ttl_us.
const permitGrant = `INSERT INTO {p} (name, token, owner, holder, bell, expires_at)
VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)`

// permitExtend renews a live permit of owner (found by its token: the
// primary key), and records where its bell is now. Parameters: ttl_us,
// bell, name, token, owner.
const permitExtend = `UPDATE {p} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, bell = ?
WHERE name = ? AND token = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)`

// permitRelease frees a live permit of owner, as release does a lease.
// Parameters: name, token, owner.
const permitRelease = `UPDATE {p} SET owner = NULL, holder = NULL, bell = NULL, expires_at = '1000-01-01 00:00:00'
WHERE name = ? AND token = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)`

// permitBreak ends every live permit of the name. The owners stay, so that
// the grants that take their rows report Recovered. Parameter: name.
const permitBreak = `UPDATE {p} SET expires_at = '1000-01-01 00:00:00'
WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)`

// permitInspect reads the live permits of one name in grant order.
// Parameter: name.
const permitInspect = `SELECT token, holder, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
FROM {p} WHERE name = ? AND expires_at > UTC_TIMESTAMP(6) ORDER BY token`

// permitList reads the live permits whose names start with a prefix, as
// list does, by name and then in grant order. Parameters: prefix,
// len(prefix), prefix.
const permitList = `SELECT name, token, holder, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
FROM {p} WHERE name >= ? AND LEFT(name, ?) = ? AND expires_at > UTC_TIMESTAMP(6)
ORDER BY name, token`

// permitWait is a semaphore waiter's server-side wait, the wait statement's
// counterpart (the same outcomes). A session can block on one bell only, so
// it waits on the bell of the live permit that expires first among those
// held by other drivers (this driver's own releases wake its waiters
// in-process): the permit renewed longest ago, the likeliest to end next.
// It wakes when that permit is released, lost, or its holder dies, and
// when its lease runs out; a release of another permit is seen at the next
// look (after a ring, at the cap, or at the portable layer's retry). The
// bell's name is computed here as permitBell does in Go: "dlock:" and the
// first 32 hex digits of the SHA-256 of the prefix parameter (table, NUL,
// name, 0xFF) followed by the token in decimal.
//
//	1  no live permit: try now
//	4  every live permit is this driver's: wait in-process
//	2, 3, 5, 0  as in wait, for the chosen permit
//
// Parameters: name, cap_seconds, bell prefix, name, own bell connection id
// (0 if none).
const permitWait = `SELECT CASE
	WHEN p.token IS NULL THEN IF(EXISTS (SELECT 1 FROM {p} WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)), 4, 1)
	WHEN IS_USED_LOCK(p.b) = p.bell THEN 2 + COALESCE(
		GET_LOCK(p.b, LEAST(?, CEIL(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), p.expires_at) / 1000000)))
		AND RELEASE_LOCK(p.b), 0)
	WHEN p.bell IS NOT NULL AND IS_USED_LOCK(p.b) IS NULL THEN 5
	ELSE 0 END
FROM (SELECT 1) AS one LEFT JOIN (
	SELECT token, bell, expires_at, CONCAT('dlock:', LEFT(SHA2(CONCAT(?, token), 256), 32)) AS b
	FROM {p} WHERE name = ? AND expires_at > UTC_TIMESTAMP(6) AND NOT (bell <=> ?)
	ORDER BY expires_at LIMIT 1) AS p ON 1`

// waitSlots is how many user locks ("waiting slots") a name's waiters hold
// to show holders that they wait: one is enough to show it, several so that
// it stays shown while the holder of one slot is being granted.
const waitSlots = 4

// waitingSlots is true when a session holds one of the name's waiting slots:
// user locks named by the parameter (waitingPrefix) and a digit.
var waitingSlots = func() string {
	var b strings.Builder
	b.WriteString("COALESCE(")
	for i := range waitSlots {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "IS_USED_LOCK(CONCAT(?, '%d'))", i)
	}
	b.WriteString(") IS NOT NULL")
	return b.String()
}()

// takeSlot takes the first free waiting slot, unless the first parameter
// says the session holds one.
var takeSlot = func() string {
	var b strings.Builder
	b.WriteString("CASE WHEN ? THEN -1")
	for i := range waitSlots {
		fmt.Fprintf(&b, " WHEN GET_LOCK(CONCAT(?, '%d'), 0) THEN %d", i, i)
	}
	b.WriteString(" ELSE -2 END")
	return b.String()
}()

// queries binds the statements to one table.
type queries struct {
	createTable, acquire, extend, release, breakLease, inspect, list, wait string

	createPermits, permitCounter, permitCount, permitReuse, permitGrant, permitExtend,
	permitRelease, permitBreak, permitInspect, permitList, permitWait string

	createQueue, acquireFair, releaseFair, enqueue, heartbeat, dequeue, queueAhead, queueWaiters, waitFair string

	extendMany, heldMany [len(batchSlots)]string // see batch.go
}

func newQueries(quotedTable, quotedPermits, quotedQueue string) queries {
	r := strings.NewReplacer("{t}", quotedTable, "{p}", quotedPermits, "{q}", quotedQueue, "{live}", queueLive,
		"{waiting}", waitingSlots, "{takeSlot}", takeSlot)
	q := queries{
		createTable: r.Replace(createTable),
		acquire:     r.Replace(acquire),
		extend:      r.Replace(extend),
		release:     r.Replace(release),
		breakLease:  r.Replace(breakLease),
		inspect:     r.Replace(inspect),
		list:        r.Replace(list),
		wait:        r.Replace(wait),

		createPermits: r.Replace(createPermits),
		permitCounter: r.Replace(permitCounter),
		permitCount:   r.Replace(permitCount),
		permitReuse:   r.Replace(permitReuse),
		permitGrant:   r.Replace(permitGrant),
		permitExtend:  r.Replace(permitExtend),
		permitRelease: r.Replace(permitRelease),
		permitBreak:   r.Replace(permitBreak),
		permitInspect: r.Replace(permitInspect),
		permitList:    r.Replace(permitList),
		permitWait:    r.Replace(permitWait),

		createQueue:  r.Replace(createQueue),
		acquireFair:  r.Replace(acquireFair),
		releaseFair:  r.Replace(releaseFair),
		enqueue:      r.Replace(enqueue),
		heartbeat:    r.Replace(heartbeat),
		dequeue:      r.Replace(dequeue),
		queueAhead:   r.Replace(queueAhead),
		queueWaiters: r.Replace(queueWaiters),
		waitFair:     r.Replace(waitFair),
	}
	q.extendMany, q.heldMany = manyQueries(r)
	return q
}

// Fair waiting (driver.Request.Fair; see the package doc and fair.go). {q}
// is the quoted queue table (queueTable). A fair waiter holds a queue lock
// — the user lock "dlock:q" followed by driver.NameHash of its owner key —
// on its own session for as long as it waits, and its queue entry records
// that session's id: an entry is live while its expires_at (by the
// server's clock) is ahead and its queue lock is held by that session
// ({live}), so the entry of a waiter whose session ended counts no more at
// once, and that of a stalled one when its heartbeat stops.

// createQueue is the queue table: one row per waiting fair Lock, in
// arrival order (seq). bell is the waiter's driver's bell connection, ttl_us
// the lease it asked for: a release that hands the lock to the entry
// writes both into the lease row. An entry that a release handed the lock
// to, or that ended, has expires_at at the sentinel; its waiter deletes it.
const createQueue = `CREATE TABLE IF NOT EXISTS {q} (
	seq        BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
	name       VARBINARY(1024) NOT NULL,
	owner      VARBINARY(64) NOT NULL,
	holder     BLOB NULL,
	bell       BIGINT UNSIGNED NULL,
	session    BIGINT UNSIGNED NOT NULL,
	ttl_us     BIGINT UNSIGNED NOT NULL,
	expires_at DATETIME(6) NOT NULL,
	PRIMARY KEY (seq),
	KEY by_name (name, seq)
) ENGINE=InnoDB`

// queueLive is true for a live entry w (see above).
const queueLive = `w.expires_at > UTC_TIMESTAMP(6) AND IS_USED_LOCK(CONCAT('dlock:q', LEFT(SHA2(w.owner, 256), 32))) <=> w.session`

// acquireFair is acquire for a fair request: the lock is free for it only
// if no live entry is queued ahead of it (seq below the parameter; a
// request not queued passes the largest seq). One subquery reads the
// queue: the first live entry other than the request's own, into
// @dlock_next; the lock is free for the request if there is none or it is
// behind the request. The condition is evaluated once, into @dlock_free,
// by the first assignment, and the later ones read it; @dlock_next is read
// only where the first assignment set it (a free lock). waited (bit 2) is
// 1 when some other live entry is queued, so that the new holder takes its
// bell at once. (It read the queue in two EXISTS, one for each question,
// before: in one interleaved run the bare fair acquire and release took
// 622 µs with them, 570 µs with one subquery, the plain pair 491 µs.
// BenchmarkMariaDBVsFloor reports bare-fair-µs beside bare-µs.)
//
// Parameters: name, owner, holder, bell, ttl_us, then name, seq, seq (the
// queue), then owner, holder, bell, ttl_us.
const acquireFair = `INSERT INTO {t} (name, owner, token, holder, bell, expires_at)
VALUES (?, ?, LAST_INSERT_ID(9) >> 3, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
	token = IF(@dlock_free := (expires_at <= UTC_TIMESTAMP(6) AND COALESCE((@dlock_next := (
			SELECT w.seq FROM {q} AS w WHERE w.name = ? AND w.seq <> ? AND {live} ORDER BY w.seq LIMIT 1)) > ?, TRUE)),
		LAST_INSERT_ID((token + 1) << 3 | (@dlock_next IS NOT NULL) << 2 | (owner IS NOT NULL) << 1 | 1) >> 3,
		token + (LAST_INSERT_ID(GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), 0) << 1) & 0)),
	owner = IF(@dlock_free, ?, owner),
	holder = IF(@dlock_free, ?, holder),
	bell = IF(@dlock_free, ?, bell),
	expires_at = IF(@dlock_free, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, expires_at)`

// releaseFair frees a live lease of owner and, in the same statement,
// hands it to the first live entry of the queue, if there is one: a new
// token, the entry's owner, holder, bell connection and TTL from now by
// the server's clock; the entry ends (expires_at at the sentinel). The
// head is read in a derived table with LIMIT, which the server
// materializes before it updates, so the queue table may be both read and
// written (MySQL's error 1093 concerns merged subqueries only). A release
// that hands off changes two rows, one that frees the lock one; none: the
// lease was not this owner's.
//
// Sent on the bell connection (bells.execDropping), it also drops the
// holder's bell once it has changed the lease row: RELEASE_LOCK in the
// holder's assignment, which the server evaluates only for a row it
// updates, so a lease that was not this owner's keeps its bell until the
// keeper drops it. The bell's waiter may wake before the statement
// commits; its next look then still finds the old row, with the bell not
// taken (waitFair's 5), and looks again. On another session RELEASE_LOCK
// finds the bell not its own and does nothing.
//
// Parameters: name, bell, name, owner.
const releaseFair = `UPDATE {t} AS l
LEFT JOIN (SELECT w.seq FROM {q} AS w WHERE w.name = ? AND {live} ORDER BY w.seq LIMIT 1) AS h ON 1
LEFT JOIN {q} AS n ON n.seq = h.seq
SET l.token = l.token + (n.seq IS NOT NULL), l.owner = n.owner,
	l.holder = IF(RELEASE_LOCK(?) IS NULL, n.holder, n.holder), l.bell = n.bell,
	l.expires_at = IF(n.seq IS NULL, '1000-01-01 00:00:00', UTC_TIMESTAMP(6) + INTERVAL n.ttl_us MICROSECOND),
	n.expires_at = '1000-01-01 00:00:00'
WHERE l.name = ? AND l.owner = ? AND l.expires_at > UTC_TIMESTAMP(6)`

// enqueue adds a fair waiter's entry, on the waiter's session, if that
// session takes the waiter's queue lock (the last parameter): one round
// trip. Parameters: name, owner, holder, bell, ttl_us, entry ttl_us, queue
// lock.
const enqueue = `INSERT INTO {q} (name, owner, holder, bell, session, ttl_us, expires_at)
SELECT ?, ?, ?, ?, CONNECTION_ID(), ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND FROM DUAL WHERE GET_LOCK(?, 0) = 1`

// heartbeat renews a live entry, and records where its driver's bell is
// now. Parameters: entry ttl_us, bell, seq.
const heartbeat = `UPDATE {q} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, bell = ?
WHERE seq = ? AND expires_at > UTC_TIMESTAMP(6)`

// dequeue deletes an entry, and the name's entries that are no longer
// live: those of waiters that crashed or stalled, which no other statement
// deletes. Every statement reads only live entries, and an entry that is no
// longer live never is again (its expiry is renewed only while it has not
// passed; its queue lock is named by an owner key no other Lock uses, and
// is taken before the entry is written). Parameters: name, seq.
const dequeue = `DELETE w FROM {q} AS w WHERE w.name = ? AND (w.seq = ? OR NOT ({live}))`

// queueAhead counts the live entries of a name queued ahead of seq: a fair
// semaphore's grant, in its transaction, counts them with the live
// permits. Parameters: name, seq.
const queueAhead = `SELECT COUNT(*) FROM {q} AS w WHERE w.name = ? AND w.seq < ? AND {live}`

// queueWaiters reads the holders of the live entries of a name, in order.
// Parameter: name.
const queueWaiters = `SELECT w.holder FROM {q} AS w WHERE w.name = ? AND {live} ORDER BY w.seq`

// waitFair is a queued fair waiter's server-side wait, on its own session.
// It waits for one event only, so that a hand-off wakes one waiter:
//
//	6  the lock was handed to this waiter (its owner holds it): the token
//	   is in the second column
//	9  it waited on the holder's bell, the bell rang, and the lock had
//	   been handed to this waiter: the token is in the second column
//	8  it waited on its predecessor's queue lock, and the predecessor left
//	   the queue or its session ended; 7: the wait ran out
//	1  nobody live is ahead and the lock is free or expired: try now
//	4  nobody live is ahead and this driver holds the lock: wait in-process
//	2, 3 nobody live is ahead: it waited on the holder's bell (3: it rang)
//	5  nobody live is ahead, the holder's bell is not taken yet: look again soon
//	0  nobody live is ahead, the holder has no bell: poll until its expiry
//
// The third column is the holder's remaining lease in microseconds.
// Waits are bounded by the cap, by the predecessor entry's expiry and by
// the lease's.
//
// The wait is a derived table with LIMIT, which the server materializes
// — its reads, and its GET_LOCK, done — before it reads the outer table.
// Only after a ring (3) does the outer query read the lease row again: a
// locking read (LOCK IN SHARE MODE), which sees the newest committed row
// rather than the statement's snapshot, and waits for a release that has
// dropped the bell but not yet committed (releaseFair). So a waiter that
// is handed the lock learns it in the statement the ring ended, with no
// look of its own. The derived table's reads take no locks: the lock
// clause is the outer query's (a share lock held while blocked would stall
// the release). Parameters: owner, cap_seconds, own bell connection id,
// bell, bell, cap_seconds, bell, bell, name, name, seq, name, owner.
const waitFair = `SELECT IF(x.owner IS NOT NULL, 9, w.st), IF(x.owner IS NOT NULL, x.token, w.token),
	IF(x.owner IS NOT NULL, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), x.expires_at), w.left_us)
FROM (SELECT CASE
	WHEN l.owner = ? AND l.expires_at > UTC_TIMESTAMP(6) THEN 6
	WHEN p.q IS NOT NULL THEN 7 + COALESCE(
		GET_LOCK(p.q, LEAST(?, CEIL(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), p.expires_at) / 1000000)))
		AND RELEASE_LOCK(p.q), 1)
	WHEN l.owner IS NULL OR l.expires_at <= UTC_TIMESTAMP(6) THEN 1
	WHEN l.bell = ? THEN 4
	WHEN IS_USED_LOCK(?) = l.bell THEN 2 + COALESCE(
		GET_LOCK(?, LEAST(?, CEIL(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires_at) / 1000000)))
		AND RELEASE_LOCK(?), 0)
	WHEN l.bell IS NOT NULL THEN 5
	ELSE 0 END AS st,
	COALESCE(l.token, 0) AS token, COALESCE(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires_at), 0) AS left_us
FROM (SELECT 1) AS one
LEFT JOIN {t} AS l ON l.name = ?
LEFT JOIN (SELECT CONCAT('dlock:q', LEFT(SHA2(w.owner, 256), 32)) AS q, w.expires_at FROM {q} AS w
	WHERE w.name = ? AND w.seq < ? AND {live} ORDER BY w.seq DESC LIMIT 1) AS p ON 1
LIMIT 1) AS w
LEFT JOIN {t} AS x ON x.name = IF(w.st = 3, ?, NULL) AND x.owner = ? AND x.expires_at > UTC_TIMESTAMP(6)
LOCK IN SHARE MODE`
