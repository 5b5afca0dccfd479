package pglock

import "strings"

// The statements, in plain sight. {{table}} and {{seq}} are replaced by the quoted
// identifiers of the lease table and its token sequence when a Driver is
// made; everything that comes from a caller — names, owners, metadata — is a
// bind parameter, never spliced into the text.
//
// Times are the server's: clock_timestamp() (the time the expression is
// evaluated, not the start of the transaction) decides whether a lease has
// expired and when a new one will; the client sends only durations.
const (
	// createSQL makes the sequence and the table. The sequence is not owned
	// by the table on purpose: dropping and re-creating the table must not
	// restart the tokens.
	//
	// A name's row, once inserted, stays: release marks it free (owner ''),
	// expiry and Break leave it expired. This is what keeps tokens ordered:
	// every grant after the first updates the row, drawing its token from
	// the sequence only after it holds the row's lock, so each grant's token
	// is drawn after the previous grant committed. (A token drawn in an
	// INSERT's VALUES is drawn before the conflict check; were rows deleted,
	// an insert that drew early and stalled could land after a later grant
	// with a smaller token.) took_over records whether this grant ended a
	// lease that had not been released (expired, crashed or broken).
	createSQL = `
CREATE SEQUENCE IF NOT EXISTS {{seq}} AS bigint;
CREATE TABLE IF NOT EXISTS {{table}} (
	name        bytea       PRIMARY KEY,
	owner       text        NOT NULL,
	token       bigint      NOT NULL,
	holder      bytea,
	expires_at  timestamptz NOT NULL,
	acquired_at timestamptz NOT NULL,
	took_over   boolean     NOT NULL DEFAULT false,
	session_key bigint
);` + createPermitsSQL

	// createPermitsSQL makes the permits table of the semaphores (a name
	// acquired with Request.Limit > 1): one row per permit, keyed by the
	// name and the permit's owner. It is made with the lease table, and
	// beside a lease table made by a version without semaphores on first
	// use (or by Migrate). A permit's row may be deleted: its token is
	// drawn while the grant holds the name's row of the lease table (see
	// permitAcquireSQL), never by the insert that races others, so nothing
	// orders tokens but that lock. Released permits are deleted; a permit
	// that ended without a release (expired, crashed, broken) stays until
	// a grant needs its place, so that the grant can report it
	// (Grant.Recovered).
	//
	// The waiters table, made with it, is the queue of the waiters of a
	// name (see the statements of the queue below).
	createPermitsSQL = `
CREATE TABLE IF NOT EXISTS {{permits}} (
	name       bytea       NOT NULL,
	owner      text        NOT NULL,
	token      bigint      NOT NULL,
	holder     bytea,
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (name, owner)
);
CREATE TABLE IF NOT EXISTS {{waiters}} (
	name       bytea       NOT NULL,
	owner      text        NOT NULL,
	seq        bigint      NOT NULL,
	holder     bytea,
	ttl_us     bigint      NOT NULL,
	reply      text        NOT NULL,
	listen_key bigint      NOT NULL,
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (name, owner)
)`

	// resolveSQL returns the schema and name of the table ($1) and of the
	// sequence ($2) as the server resolves their spelling (to_regclass
	// parses the quoted names as identifiers, an unqualified one along the
	// search path), or NULLs for one that does not exist; then whether the
	// permits table (same schema, the table's name followed by _permits)
	// and the waiters table (…_waiters) both exist beside the table, and
	// whether this role may use each.
	// (has_table_privilege with a list of privileges is true if any is
	// held, hence one call each.)
	resolveSQL = `
SELECT tn.nspname::text, t.relname::text, sn.nspname::text, s.relname::text, p.oid IS NOT NULL AND w.oid IS NOT NULL,
       coalesce(has_table_privilege(p.oid, 'SELECT') AND has_table_privilege(p.oid, 'INSERT')
                AND has_table_privilege(p.oid, 'UPDATE') AND has_table_privilege(p.oid, 'DELETE'), false),
       coalesce(has_table_privilege(w.oid, 'SELECT') AND has_table_privilege(w.oid, 'INSERT')
                AND has_table_privilege(w.oid, 'UPDATE') AND has_table_privilege(w.oid, 'DELETE'), false)
FROM (SELECT to_regclass($1) AS t, to_regclass($2) AS s) r
LEFT JOIN pg_class t ON t.oid = r.t LEFT JOIN pg_namespace tn ON tn.oid = t.relnamespace
LEFT JOIN pg_class s ON s.oid = r.s LEFT JOIN pg_namespace sn ON sn.oid = s.relnamespace
LEFT JOIN pg_class p ON p.relnamespace = t.relnamespace AND p.relname = t.relname || '_permits' AND p.relkind IN ('r', 'p')
LEFT JOIN pg_class w ON w.relnamespace = t.relnamespace AND w.relname = t.relname || '_waiters' AND w.relkind IN ('r', 'p')`

	// acquireSQL takes the lock in one statement: insert the name's first
	// lease, or take over a lease that is free or has expired by the
	// server's clock, with a fresh token. It returns one row either way:
	// the grant (token, whether an unreleased lease was taken over), or,
	// when the lock is held, the holder's remaining TTL in microseconds (0
	// if the statement's snapshot saw an older version of the row, free). A
	// takeover notifies waiters, which then re-arm their expiry timers on
	// the new holder.
	//
	// A session lock ($7 not NULL) is written by a client that already holds
	// the name's advisory lock ($7). It also takes over another session
	// lock's live row, but only when that row's own advisory key is held by
	// no session: the same key as ours (which we hold, so its old holder's
	// session has ended), or a key nobody holds (its session ended). A row
	// whose key differs from ours and is held — a client that hashed the
	// table's name differently, as versions before the name was resolved
	// to its schema did — is left alone.
	//
	// $1 name, $2 owner, $3 holder metadata, $4 TTL in µs, $5 channel,
	// $6 payload, $7 session key (NULL for a lease).
	acquireSQL = `
WITH ins AS (
	INSERT INTO {{table}} AS l (name, owner, token, holder, expires_at, acquired_at, session_key)
	VALUES ($1, $2, nextval({{seqname}}), $3, clock_timestamp() + $4::bigint * interval '1 microsecond', clock_timestamp(), $7::bigint)
	ON CONFLICT (name) DO UPDATE
	SET owner = excluded.owner, token = nextval({{seqname}}), holder = excluded.holder,
	    expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond', acquired_at = clock_timestamp(),
	    took_over = l.owner <> '', session_key = excluded.session_key
	WHERE l.expires_at <= clock_timestamp()
	   OR (l.session_key IS NOT NULL AND $7::bigint IS NOT NULL
	       AND (l.session_key = $7::bigint OR NOT ` + sessionHeldSQL + `))
	RETURNING l.token, l.took_over
)
SELECT token, took_over, 0::bigint, CASE WHEN took_over THEN pg_notify($5, $6)::text END FROM ins
UNION ALL
SELECT NULL, NULL, (extract(epoch FROM greatest(expires_at, clock_timestamp()) - clock_timestamp()) * 1e6)::bigint, NULL
FROM {{table}} WHERE name = $1 AND NOT EXISTS (SELECT FROM ins)`

	// extendSQL renews a live lease of its owner.
	// $1 name, $2 owner, $3 TTL in µs.
	extendSQL = `
UPDATE {{table}} SET expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
WHERE name = $1 AND owner = $2 AND expires_at > clock_timestamp()`

	// extendManySQL is extendSQL for many leases of one TTL at once
	// (driver.BatchExtender): it returns the ones it renewed.
	// $1 names, $2 their owners, $3 TTL in µs.
	extendManySQL = `
UPDATE {{table}} AS l SET expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
FROM unnest($1::bytea[], $2::text[]) AS b(name, owner)
WHERE l.name = b.name AND l.owner = b.owner AND l.expires_at > clock_timestamp()
RETURNING l.name, l.owner`

	// releaseSQL frees its owner's live lease and wakes the waiters (the
	// notification is delivered when the statement commits).
	// $1 name, $2 owner, $3 channel, $4 payload.
	releaseSQL = `
WITH r AS (
	UPDATE {{table}} SET owner = '', holder = NULL, expires_at = '-infinity', session_key = NULL
	WHERE name = $1 AND owner = $2 AND expires_at > clock_timestamp()
	RETURNING name
)
SELECT pg_notify($3, $4)::text FROM r`

	// liveSQL is the condition for a row that holds its lock: its lease has
	// not expired, and, for a session lock, the advisory lock is still held
	// by some session (a crashed holder's is gone at once).
	liveSQL = `l.expires_at > clock_timestamp() AND (l.session_key IS NULL OR ` + sessionHeldSQL + `)`

	// sessionHeldSQL is true when some session holds the advisory lock of
	// the row l's session key (pg_advisory_lock(bigint) puts the key's high
	// half in classid, its low half in objid, and 1 in objsubid).
	sessionHeldSQL = `EXISTS (
	SELECT FROM pg_locks k
	WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 1
	  AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	  AND k.classid::bigint = (l.session_key >> 32) & 4294967295
	  AND k.objid::bigint = l.session_key & 4294967295)`

	// inspectSQL reports a live lease. $1 name.
	inspectSQL = `
SELECT l.name, l.token, l.holder, (extract(epoch FROM l.expires_at - clock_timestamp()) * 1e6)::bigint
FROM {{table}} l WHERE l.name = $1 AND ` + liveSQL

	// listSQL reports the live leases whose names lie in [$1, $2), or from
	// $1 on when $2 is NULL.
	listSQL = `
SELECT l.name, l.token, l.holder, (extract(epoch FROM l.expires_at - clock_timestamp()) * 1e6)::bigint
FROM {{table}} l WHERE l.name >= $1 AND ($2::bytea IS NULL OR l.name < $2) AND ` + liveSQL + `
ORDER BY l.name`

	// breakSQL ends a live lease whoever holds it, and wakes the waiters.
	// The row stays, expired with its owner, so that the next grant is
	// reported as a takeover (Grant.Recovered). A session lock's holder is
	// also disconnected, which frees its advisory lock.
	// $1 name, $2 channel, $3 payload.
	breakSQL = `
WITH b AS (
	UPDATE {{table}} l SET expires_at = '-infinity'
	WHERE l.name = $1 AND ` + liveSQL + `
	RETURNING l.session_key
)
SELECT pg_notify($2, $3)::text,
       (SELECT count(pg_terminate_backend(k.pid)) FROM pg_locks k
        WHERE b.session_key IS NOT NULL AND k.locktype = 'advisory' AND k.granted AND k.objsubid = 1
          AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND k.classid::bigint = (b.session_key >> 32) & 4294967295
          AND k.objid::bigint = b.session_key & 4294967295)
FROM b`
)

// The statements of semaphores (Request.Limit > 1). A permit is granted in
// one round trip of two statements, sent as one pipeline in one READ
// COMMITTED transaction (tryPermit begins it so, whatever the server's
// default): lockNameSQL locks the name's row of the lease table, then
// permitAcquireSQL counts the live permits and inserts one.
// Two statements because in READ COMMITTED each statement sees the
// database as of its own start: a single statement that waited for the
// row lock would still count the permits as they were before it waited,
// missing a permit granted meanwhile, and grant one too many. The second
// statement starts after the lock is ours, so it sees every permit
// granted before, and none can be granted until it commits.
const (
	// permitAcquireSQL grants a permit if fewer than $5 permits of the name
	// are live by the server's clock, with a token drawn now, under the
	// name's row lock: tokens of one name increase in grant order,
	// whatever permit a grant takes. Each client judges by its own limit,
	// so a client with a lowered limit waits while holders above it keep
	// their permits. It returns one row either way: the grant (token,
	// whether it took the place of a permit that ended unreleased), or,
	// when the limit is reached, the time in microseconds until the
	// soonest live permit expires, which is when a waiter must look again
	// (an expiry sends no notification).
	//
	// Permits that ended without a release (expired, crashed, broken) stay
	// until a grant needs their place: a grant that would not fit if they
	// were still held (live + ended >= $5) deletes the oldest of them, as
	// many as it needs, and is reported as a takeover (Grant.Recovered),
	// as the mutex's is; like it, it notifies the waiters, which re-arm
	// their timers.
	//
	// $1 name, $2 owner, $3 holder metadata, $4 TTL in µs, $5 limit,
	// $6 channel, $7 payload.
	permitAcquireSQL = `
WITH now AS (SELECT clock_timestamp() AS t),
c AS (
	SELECT count(*) FILTER (WHERE p.expires_at > now.t) AS live,
	       count(*) AS kept,
	       min(p.expires_at) FILTER (WHERE p.expires_at > now.t) AS soonest
	FROM {{permits}} p, now WHERE p.name = $1
),
gone AS (
	DELETE FROM {{permits}} g USING now
	WHERE g.name = $1 AND g.expires_at <= now.t AND g.owner IN (
		SELECT e.owner FROM {{permits}} e, now WHERE e.name = $1 AND e.expires_at <= now.t
		ORDER BY e.token
		LIMIT (SELECT CASE WHEN c.live < $5 THEN greatest(c.kept + 1 - $5, 0) ELSE 0 END FROM c))
	RETURNING 1
),
ins AS (
	INSERT INTO {{permits}} (name, owner, token, holder, expires_at)
	SELECT $1::bytea, $2::text, nextval({{seqname}}), $3::bytea, clock_timestamp() + $4::bigint * interval '1 microsecond'
	FROM c WHERE c.live < $5
	RETURNING token
)
SELECT ins.token, r.took_over, 0::bigint, CASE WHEN r.took_over THEN pg_notify($6, $7)::text END
FROM ins, (SELECT EXISTS (SELECT FROM gone) AS took_over) r
UNION ALL
SELECT NULL, NULL, coalesce((extract(epoch FROM greatest(c.soonest, clock_timestamp()) - clock_timestamp()) * 1e6)::bigint, 0), NULL
FROM c WHERE NOT EXISTS (SELECT FROM ins)`

	// permitExtendSQL renews a live permit of its owner.
	// $1 name, $2 owner, $3 TTL in µs.
	permitExtendSQL = `
UPDATE {{permits}} SET expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
WHERE name = $1 AND owner = $2 AND expires_at > clock_timestamp()`

	// permitReleaseSQL deletes its owner's live permit and wakes the
	// waiters (the notification is delivered when the statement commits).
	// It takes no lock of the name: a grant that counted the permit as
	// live just before is a waiter, and is woken by this notification.
	// $1 name, $2 owner, $3 channel, $4 payload.
	permitReleaseSQL = `
WITH r AS (
	DELETE FROM {{permits}}
	WHERE name = $1 AND owner = $2 AND expires_at > clock_timestamp()
	RETURNING name
)
SELECT pg_notify($3, $4)::text FROM r`

	// permitInspectSQL reports the live permits of a name in grant order
	// (token order: tokens increase in grant order). $1 name.
	permitInspectSQL = `
SELECT p.name, p.token, p.holder, (extract(epoch FROM p.expires_at - clock_timestamp()) * 1e6)::bigint
FROM {{permits}} p WHERE p.name = $1 AND p.expires_at > clock_timestamp()
ORDER BY p.token`

	// permitListSQL reports the live permits whose names lie in [$1, $2),
	// or from $1 on when $2 is NULL, by name and in grant order.
	permitListSQL = `
SELECT p.name, p.token, p.holder, (extract(epoch FROM p.expires_at - clock_timestamp()) * 1e6)::bigint
FROM {{permits}} p WHERE p.name >= $1 AND ($2::bytea IS NULL OR p.name < $2) AND p.expires_at > clock_timestamp()
ORDER BY p.name, p.token`

	// permitBreakSQL ends every live permit of a name, whoever holds it,
	// and wakes the waiters; one row if there was any. The rows stay,
	// expired, so that the grants that take their places are reported as
	// takeovers (Grant.Recovered). Each holder's next renewal finds its
	// permit gone (ErrLeaseLost); the next grant draws a token from the
	// sequence, above all of theirs.
	// $1 name, $2 channel, $3 payload.
	permitBreakSQL = `
WITH b AS (
	UPDATE {{permits}} SET expires_at = '-infinity'
	WHERE name = $1 AND expires_at > clock_timestamp()
	RETURNING 1
)
SELECT pg_notify($2, $3)::text FROM b LIMIT 1`
)

// bind puts the quoted table, sequence, permits and waiters table names
// into a statement; {{seqname}} is the sequence's name as a string
// literal, for nextval.
func bind(sql, table, seq, permits, waiters string) string {
	return strings.NewReplacer("{{table}}", table, "{{seq}}", seq, "{{seqname}}", quoteLiteral(seq),
		"{{permits}}", permits, "{{waiters}}", waiters).Replace(sql)
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// The statements of the queue. A waiter of a mutex (a Lock) or of a fair
// semaphore has an entry in the waiters table: its place (seq, drawn from
// the token sequence when it arrives), the lease it asks for (holder
// metadata, TTL), where to tell it that it was handed the lock (reply: its
// driver's own NOTIFY channel; listen_key: an advisory lock that the
// connection listening on it holds while it lives), and its own short lease (expires_at), renewed by each of its
// attempts. An entry whose lease ran out is dropped by the next attempt
// of the name; an entry whose listening connection is gone (its process
// died, or the connection broke) is passed over until it renews.
//
// Every statement that grants, hands over or reads the queue to decide
// runs in a READ COMMITTED transaction after lockNameSQL, which locks the
// name's row of the lease table: each then sees every entry and every
// grant committed before it, and none can change until it commits. (One
// statement that waited for the row lock would read the queue as it was
// before it waited, and could hand the lock to a waiter that has just
// given up.)
const (
	// lockNameSQL locks the name's row of the lease table, made if the
	// name has none (free: no owner, expired, token 0, a token no grant
	// ever returns). The row is written even when nothing in it changes:
	// its new version tells the one-statement fast paths (fastAcquireSQL,
	// handOffSQL alone) that the queue or the permits may have changed
	// since their snapshot (see rowUnchangedSQL). $1 name.
	lockNameSQL = `
INSERT INTO {{table}} AS l (name, owner, token, expires_at, acquired_at)
VALUES ($1, '', 0, '-infinity', clock_timestamp())
ON CONFLICT (name) DO UPDATE SET owner = l.owner`

	// rowUnchangedSQL is true when the version of the name's row l that a
	// statement writes is the one its snapshot sees: no transaction that
	// locked the row (each writes it, lockNameSQL) committed between the
	// statement's start and its taking of the row lock. A statement that
	// runs alone, outside underNameLock, reads the queue and the permits
	// as of its start, and waits for the row lock after: what it read is
	// still so only if this holds; if not, it changes nothing and the
	// caller goes the way of underNameLock. (xmin is the transaction that
	// wrote the version; the sub-select reads the version the snapshot
	// sees, NULL if it sees none.)
	rowUnchangedSQL = `l.xmin = (SELECT s.xmin FROM {{table}} s WHERE s.name = $1)`

	// fastAcquireSQL is the fast path of a mutex's or a writer's acquire,
	// one statement without underNameLock: as acquireSQL, it takes a lock
	// that is free or expired by the server's clock, with a token drawn
	// under the name's row lock, but only while no reader of a read-write
	// lock holds a live permit of the name and, unless it barges ($7, a
	// plain Lock's first attempt), nobody live is queued; and only when the
	// row is unchanged since the statement began (rowUnchangedSQL), so that
	// what it read of the queue and the permits is still so. Otherwise it
	// changes nothing and reports the holder's remaining TTL, 0 when the
	// lock may be free: the caller then goes to the queue.
	// $1 name, $2 owner, $3 holder metadata, $4 TTL in µs, $5 the table's
	// channel, $6 payload, $7 barge.
	// Returns token, took_over, remaining µs, notify.
	fastAcquireSQL = `
WITH ins AS (
	INSERT INTO {{table}} AS l (name, owner, token, holder, expires_at, acquired_at)
	VALUES ($1, $2, nextval({{seqname}}), $3, clock_timestamp() + $4::bigint * interval '1 microsecond', clock_timestamp())
	ON CONFLICT (name) DO UPDATE
	SET owner = excluded.owner, token = nextval({{seqname}}), holder = excluded.holder,
	    expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond', acquired_at = clock_timestamp(),
	    took_over = l.owner <> '', session_key = NULL
	WHERE l.expires_at <= clock_timestamp() AND ` + rowUnchangedSQL + `
	  AND NOT EXISTS (SELECT FROM {{permits}} p WHERE p.name = $1 AND p.expires_at > clock_timestamp())
	  AND ($7 OR NOT EXISTS (SELECT FROM {{waiters}} w WHERE w.name = $1 AND ` + waiterLiveSQL + `))
	RETURNING l.token, l.took_over
)
SELECT token, took_over, 0::bigint, CASE WHEN took_over THEN pg_notify($5, $6)::text END FROM ins
UNION ALL
SELECT NULL, NULL, (extract(epoch FROM greatest(expires_at, clock_timestamp()) - clock_timestamp()) * 1e6)::bigint, NULL
FROM {{table}} WHERE name = $1 AND NOT EXISTS (SELECT FROM ins)`

	// waiterLiveSQL is true for an entry w of the queue that may be served:
	// its lease has not run out and the connection that listens for its
	// hand-off is still there: it holds the advisory lock listen_key,
	// which a shared lock therefore cannot be granted. (A grant of the
	// shared lock, when it is gone, lasts until the transaction ends and
	// harms no one. Asking pg_stat_activity instead costs a read of every
	// backend's status, several times a round trip.)
	waiterLiveSQL = `(w.expires_at > clock_timestamp() AND NOT pg_try_advisory_xact_lock_shared(w.listen_key))`

	// queueAcquireSQL is one attempt of a queued acquire of a mutex, after
	// lockNameSQL. In order:
	//
	//   - the lock is this owner's (a release handed it over): the lease
	//     is renewed and reported (outcome 2), so that a hand-off whose
	//     message was lost costs one attempt;
	//   - the lock is free (released, expired, broken), no reader of a
	//     read-write lock holds a live permit of the name, and this owner
	//     is first among the live waiters, or nobody live waits, or the
	//     attempt barges ($8, a plain Lock's first): it is granted with a
	//     new token (outcome 1), and the owner leaves the queue. (A
	//     writer's request is a fair mutex's: readers are what tells it
	//     apart, and a mutex's name has none.);
	//   - otherwise, when $9 (a waiting acquire), the owner joins the queue
	//     or renews its entry (outcome 0), and the statement reports the
	//     holder's remaining TTL (or, while readers hold, the time until
	//     the last reader's lease runs out) and the name's token: a
	//     hand-off message with a token not above it was sent before this
	//     attempt, and is stale.
	//
	// Entries of others whose lease ran out are dropped. An owner whose own
	// entry ran out (it was held up longer than the waiter TTL) joins again
	// at the back.
	//
	// $1 name, $2 owner, $3 holder metadata, $4 TTL in µs, $5 waiter TTL
	// in µs, $6 reply channel, $7 listening connection's key, $8 barge, $9 queue if
	// not granted, $10 the table's channel, $11 payload.
	// Returns outcome, token, took_over, remaining µs, notify.
	queueAcquireSQL = `
WITH now AS (SELECT clock_timestamp() AS t),
cur AS (
	SELECT l.owner, l.token, l.expires_at, (` + liveSQL + `) AS live
	FROM {{table}} l WHERE l.name = $1
),
head AS (
	SELECT w.owner FROM {{waiters}} w
	WHERE w.name = $1 AND (w.owner = $2 OR ` + waiterLiveSQL + `)
	ORDER BY w.seq LIMIT 1
),
readers AS (
	SELECT p.expires_at FROM {{permits}} p, now WHERE p.name = $1 AND p.expires_at > now.t
),
renewed AS (
	UPDATE {{table}} l SET expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond'
	FROM cur WHERE l.name = $1 AND cur.owner = $2 AND cur.live
	RETURNING l.token
),
granted AS (
	UPDATE {{table}} l
	SET owner = $2, token = nextval({{seqname}}), holder = $3,
	    expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond', acquired_at = clock_timestamp(),
	    took_over = cur.owner <> '', session_key = NULL
	FROM cur WHERE l.name = $1 AND NOT cur.live AND ($8 OR NOT EXISTS (SELECT FROM head WHERE head.owner <> $2))
	  AND NOT EXISTS (SELECT FROM readers)
	RETURNING l.token, l.took_over
),
dropped AS (
	DELETE FROM {{waiters}} w USING now
	WHERE w.name = $1 AND ((w.owner <> $2 AND w.expires_at <= now.t)
	   OR (w.owner = $2 AND (EXISTS (SELECT FROM granted) OR EXISTS (SELECT FROM renewed))))
),
queued AS (
	INSERT INTO {{waiters}} AS w (name, owner, seq, holder, ttl_us, reply, listen_key, expires_at)
	SELECT $1::bytea, $2::text, nextval({{seqname}}), $3::bytea, $4::bigint, $6::text, $7::bigint,
	       clock_timestamp() + $5::bigint * interval '1 microsecond'
	WHERE $9 AND NOT EXISTS (SELECT FROM granted) AND NOT EXISTS (SELECT FROM renewed)
	` + joinQueueSQL + `
)
SELECT 1, g.token, g.took_over, 0::bigint, CASE WHEN g.took_over THEN pg_notify($10, $11)::text END FROM granted g
UNION ALL
SELECT 2, r.token, false, 0::bigint, NULL FROM renewed r
UNION ALL
SELECT 0, cur.token, false,
       coalesce((extract(epoch FROM CASE WHEN cur.live THEN cur.expires_at ELSE (SELECT max(r.expires_at) FROM readers r) END
                                    - clock_timestamp()) * 1e6)::bigint, 0), NULL
FROM cur WHERE NOT EXISTS (SELECT FROM granted) AND NOT EXISTS (SELECT FROM renewed)`

	// joinQueueAloneSQL is the first attempt of a queued acquire of a mutex
	// (or a writer) when the lock is believed held by another owner (the
	// fast path found it held, or this driver's last release of the name
	// handed it on): queueAcquireSQL's outcome 0 in one statement, without
	// underNameLock's transaction. It takes the name's row lock by writing
	// the row, as lockNameSQL does (so that the one-statement paths see
	// that the queue may have changed), but only while the lease is live
	// and another owner's: a WHERE that waited for the row lock is judged
	// again on the row's newest version, so a lock released, expired or
	// handed to this owner meanwhile is seen. Then it drops the entries of
	// others that ran out, and the owner joins the queue or renews its
	// entry (joinQueueSQL). It decides on the lease alone and reads of the
	// queue only those entries, so it needs no snapshot of the queue from
	// after the lock (rowUnchangedSQL). It reports the name's token and the
	// holder's remaining TTL; when the lease is not another owner's live
	// one, it changes nothing and returns no row: the caller then makes
	// the attempt under the row lock (queueAcquireSQL), which may grant.
	// $1 name, $2 owner, $3 holder metadata, $4 TTL in µs, $5 waiter TTL
	// in µs, $6 reply channel, $7 listening connection's key.
	// Returns outcome (0), token, took_over, remaining µs, notify.
	joinQueueAloneSQL = `
WITH lk AS (
	UPDATE {{table}} l SET owner = l.owner
	WHERE l.name = $1 AND l.owner <> $2 AND ` + liveSQL + `
	RETURNING l.token, l.expires_at
),
dropped AS (
	DELETE FROM {{waiters}} w
	WHERE w.name = $1 AND w.owner <> $2 AND w.expires_at <= clock_timestamp() AND EXISTS (SELECT FROM lk)
),
queued AS (
	INSERT INTO {{waiters}} AS w (name, owner, seq, holder, ttl_us, reply, listen_key, expires_at)
	SELECT $1::bytea, $2::text, nextval({{seqname}}), $3::bytea, $4::bigint, $6::text, $7::bigint,
	       clock_timestamp() + $5::bigint * interval '1 microsecond'
	FROM lk
	` + joinQueueSQL + `
)
SELECT 0, lk.token, false, greatest((extract(epoch FROM lk.expires_at - clock_timestamp()) * 1e6)::bigint, 0), NULL::text
FROM lk`

	// handOffSQL releases its owner's live lease and hands the lock to the
	// first live waiter of the queue in the same statement: a new token,
	// the waiter's TTL and metadata; the waiter leaves the queue and is
	// told on its reply channel ("owner token"), when the statement
	// commits, and nobody else is. With nobody live waiting the lock is
	// freed, and the table's channel wakes whoever waits without a queue;
	// so it is when the first live waiter is a reader of a read-write
	// lock, which is never handed the lease: the channel wakes it and the
	// readers behind it, and each takes its permit in its own attempt
	// (readerFitsSQL).
	//
	// It runs alone, one round trip, or after lockNameSQL in a
	// transaction. Alone, it reads the queue as of its start and takes the
	// row lock after: it acts only if the row is unchanged since
	// (rowUnchangedSQL; after lockNameSQL in the same transaction it is),
	// and otherwise changes nothing and returns false: the caller runs it
	// again after lockNameSQL. (Acting on a stale queue could hand the lock
	// to a waiter that has just given up.)
	// Returns true if released, false if the caller must run it again
	// under the row lock; then whether a waiter was handed the lock; no
	// row when the lease was not the owner's (ErrLeaseLost).
	// $1 name, $2 owner, $3 the table's channel, $4 payload.
	handOffSQL = `
WITH mine AS (
	SELECT l.name FROM {{table}} l WHERE l.name = $1 AND l.owner = $2 AND l.expires_at > clock_timestamp()
),
first AS (
	SELECT w.owner, w.holder, w.ttl_us, w.reply, ` + sharedSQL + ` AS shared FROM {{waiters}} w
	WHERE w.name = $1 AND EXISTS (SELECT FROM mine) AND ` + waiterLiveSQL + `
	ORDER BY w.seq LIMIT 1
),
next AS (
	SELECT * FROM first WHERE NOT first.shared
),
r AS (
	UPDATE {{table}} l
	SET owner = coalesce(n.owner, ''),
	    token = CASE WHEN n.owner IS NULL THEN l.token ELSE nextval({{seqname}}) END,
	    holder = n.holder,
	    expires_at = CASE WHEN n.owner IS NULL THEN '-infinity'
	                      ELSE clock_timestamp() + n.ttl_us * interval '1 microsecond' END,
	    acquired_at = clock_timestamp(), took_over = false, session_key = NULL
	FROM mine LEFT JOIN next n ON true
	WHERE l.name = $1 AND l.owner = $2 AND l.expires_at > clock_timestamp() AND ` + rowUnchangedSQL + `
	RETURNING l.owner, l.token
),
gone AS (
	DELETE FROM {{waiters}} w USING next WHERE w.name = $1 AND w.owner = next.owner AND EXISTS (SELECT FROM r)
)
SELECT true, r.owner <> '', CASE WHEN r.owner = '' THEN pg_notify($3, $4)::text ELSE pg_notify(n.reply, r.owner || ' ' || r.token)::text END
FROM r LEFT JOIN next n ON true
UNION ALL
SELECT false, false, NULL FROM mine WHERE NOT EXISTS (SELECT FROM r)`

	// freeSQL is the release of a lease that nobody is queued for, the
	// common case, in a statement that costs about what a plain UPDATE
	// does (handOffSQL, which must read the queue's first live waiter and
	// may hand it the lock, costs about 30% more; BenchmarkStatements):
	// it frees its owner's live lease, and wakes whoever waits without a
	// queue on the table's channel, as handOffSQL does when nobody live
	// is queued, but only when the queue has no entry at all for the
	// name, live or not, and the row is unchanged since the statement
	// began (rowUnchangedSQL): every change to the queue is made under the
	// row's lock, which this statement then holds until it commits, so
	// the queue is empty when the release takes effect. Otherwise it
	// changes nothing and returns no row, as it does when the lease is not
	// the owner's: the caller then runs handOffSQL, which tells the two
	// apart.
	// $1 name, $2 owner, $3 the table's channel, $4 payload.
	freeSQL = `
WITH r AS (
	UPDATE {{table}} l
	SET owner = '', holder = NULL, expires_at = '-infinity', acquired_at = clock_timestamp(), took_over = false, session_key = NULL
	WHERE l.name = $1 AND l.owner = $2 AND l.expires_at > clock_timestamp() AND ` + rowUnchangedSQL + `
	  AND NOT EXISTS (SELECT FROM {{waiters}} w WHERE w.name = $1)
	RETURNING 1
)
SELECT pg_notify($3, $4)::text FROM r`

	// leaveSQL takes a waiter that gave up out of the queue, after
	// lockNameSQL; handOffSQL follows it in the same transaction, so that
	// a lock handed to the waiter meanwhile is passed on, or (for a
	// semaphore or a reader) permitReleaseSQL, so that a permit granted by
	// its last attempt is given back. While permits are held, those queued
	// behind it may now fit (readers behind a writer that gave up, or the
	// next waiters of a fair semaphore): the table's channel wakes them.
	// $1 name, $2 owner, $3 the table's channel, $4 payload.
	leaveSQL = `
WITH l AS (DELETE FROM {{waiters}} WHERE name = $1 AND owner = $2 RETURNING 1)
SELECT pg_notify($3, $4)::text FROM l
WHERE EXISTS (SELECT FROM {{permits}} p WHERE p.name = $1 AND p.expires_at > clock_timestamp())`

	// sharedSQL is true for an entry w of the queue that is a reader's: its
	// holder metadata, written by dlock's portable layer, says so
	// (driver.HolderShared).
	sharedSQL = `(position('"shared":true'::bytea in coalesce(w.holder, ''::bytea)) > 0)`

	// joinQueueSQL completes the INSERT of a waiter's entry: a waiter
	// already queued renews its entry and keeps its place, unless the entry
	// had run out: then it goes to the back.
	joinQueueSQL = `ON CONFLICT (name, owner) DO UPDATE
	SET seq = CASE WHEN w.expires_at <= clock_timestamp() THEN excluded.seq ELSE w.seq END,
	    holder = excluded.holder, ttl_us = excluded.ttl_us, reply = excluded.reply,
	    listen_key = excluded.listen_key, expires_at = excluded.expires_at`

	// queueCountedSQL is one attempt of a fair semaphore's acquire or a
	// reader's, after lockNameSQL: as permitAcquireSQL, but a permit is
	// granted only when it fits ({{fits}}: semaphoreFitsSQL or
	// readerFitsSQL, judged against the live waiters queued ahead of
	// this owner, all of them for one not queued), so permits go in
	// arrival order. A waiter that is not granted joins the queue or
	// renews its entry ($11). There is no hand-off: releases wake the
	// waiters on the table's channel, and a grant that leaves a permit
	// free for someone queued wakes them too.
	//
	// $1 name, $2 owner, $3 holder metadata, $4 TTL in µs, $5 limit,
	// $6 the table's channel, $7 payload, $8 waiter TTL in µs, $9 reply
	// channel, $10 listening connection's key, $11 queue if not granted.
	// Returns outcome (1 granted, 0 not), token, took_over, µs until the
	// soonest live permit expires, notify.
	queueCountedSQL = `
WITH now AS (SELECT clock_timestamp() AS t),
c AS (
	SELECT count(*) FILTER (WHERE p.expires_at > now.t) AS live,
	       count(*) AS kept,
	       min(p.expires_at) FILTER (WHERE p.expires_at > now.t) AS soonest
	FROM {{permits}} p, now WHERE p.name = $1
),
others AS (
	SELECT w.seq, ` + sharedSQL + ` AS shared FROM {{waiters}} w WHERE w.name = $1 AND w.owner <> $2 AND ` + waiterLiveSQL + `
),
ahead AS (
	SELECT o.shared FROM others o WHERE o.seq < coalesce(
	    (SELECT m.seq FROM {{waiters}} m, now WHERE m.name = $1 AND m.owner = $2 AND m.expires_at > now.t),
	    9223372036854775807)
),
fits AS (
	SELECT {{fits}} AS ok FROM c
),
gone AS (
	DELETE FROM {{permits}} g USING now
	WHERE g.name = $1 AND g.expires_at <= now.t AND g.owner IN (
		SELECT e.owner FROM {{permits}} e, now WHERE e.name = $1 AND e.expires_at <= now.t
		ORDER BY e.token
		LIMIT (SELECT CASE WHEN fits.ok THEN greatest(c.kept + 1 - $5, 0) ELSE 0 END FROM c, fits))
	RETURNING 1
),
ins AS (
	INSERT INTO {{permits}} (name, owner, token, holder, expires_at)
	SELECT $1::bytea, $2::text, nextval({{seqname}}), $3::bytea, clock_timestamp() + $4::bigint * interval '1 microsecond'
	FROM fits WHERE fits.ok
	RETURNING token
),
dropped AS (
	DELETE FROM {{waiters}} w USING now
	WHERE w.name = $1 AND ((w.owner <> $2 AND w.expires_at <= now.t) OR (w.owner = $2 AND EXISTS (SELECT FROM ins)))
),
queued AS (
	INSERT INTO {{waiters}} AS w (name, owner, seq, holder, ttl_us, reply, listen_key, expires_at)
	SELECT $1::bytea, $2::text, nextval({{seqname}}), $3::bytea, $4::bigint, $9::text, $10::bigint,
	       clock_timestamp() + $8::bigint * interval '1 microsecond'
	WHERE $11 AND NOT EXISTS (SELECT FROM ins)
	` + joinQueueSQL + `
)
SELECT 1, ins.token, r.took_over, 0::bigint,
       CASE WHEN r.took_over OR (c.live + 1 < $5 AND EXISTS (SELECT FROM others)) THEN pg_notify($6, $7)::text END
FROM ins, c, (SELECT EXISTS (SELECT FROM gone) AND $5 > 0 AS took_over) r
UNION ALL
SELECT 0, NULL, NULL, coalesce((extract(epoch FROM greatest(c.soonest, clock_timestamp()) - clock_timestamp()) * 1e6)::bigint, 0), NULL
FROM c WHERE NOT EXISTS (SELECT FROM ins)`

	// semaphoreFitsSQL is queueCountedSQL's rule for a fair semaphore: a
	// permit fits while the live permits and the live waiters queued ahead
	// are fewer than the limit.
	semaphoreFitsSQL = `c.live + (SELECT count(*) FROM ahead) < $5`

	// readerFitsSQL is queueCountedSQL's rule for a reader of a read-write lock
	// (driver.Request.Shared), with limit ($5) 0: a reader's permit fits
	// while no writer holds the name's lease and no live writer is queued
	// ahead of it (driver.QueueHolders' rule: readers queued ahead do not
	// hold it back, they are granted beside it). A reader not queued has
	// every live waiter ahead, so it never passes a waiting writer, even
	// on its first attempt. Readers have no limit: every expired permit of
	// the name is deleted by a reader's grant, and not reported as a
	// takeover (Grant.Recovered; a reader's lease that ended excludes no
	// one). A reader's token is drawn under the name's row lock, as a
	// writer's is: tokens increase in grant order across both.
	readerFitsSQL = `NOT EXISTS (SELECT FROM {{table}} l WHERE l.name = $1 AND ` + liveSQL + `)
	       AND NOT EXISTS (SELECT FROM ahead WHERE NOT ahead.shared)`

	// waiterInspectSQL reports the live waiters of a name in arrival
	// order. $1 name.
	waiterInspectSQL = `
SELECT w.name, w.holder FROM {{waiters}} w WHERE w.name = $1 AND ` + waiterLiveSQL + ` ORDER BY w.seq`
)
