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
)`

	// resolveSQL returns the schema and name of the table ($1) and of the
	// sequence ($2) as the server resolves their spelling (to_regclass
	// parses the quoted names as identifiers, an unqualified one along the
	// search path), or NULLs for one that does not exist.
	resolveSQL = `
SELECT tn.nspname::text, t.relname::text, sn.nspname::text, s.relname::text
FROM (SELECT to_regclass($1) AS t, to_regclass($2) AS s) r
LEFT JOIN pg_class t ON t.oid = r.t LEFT JOIN pg_namespace tn ON tn.oid = t.relnamespace
LEFT JOIN pg_class s ON s.oid = r.s LEFT JOIN pg_namespace sn ON sn.oid = s.relnamespace`

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

// bind puts the quoted table and sequence names into a statement;
// {{seqname}} is the sequence's name as a string literal, for nextval.
func bind(sql, table, seq string) string {
	return strings.NewReplacer("{{table}}", table, "{{seq}}", seq, "{{seqname}}", quoteLiteral(seq)).Replace(sql)
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
