package mysqllock

import "strings"

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
//	granted:     token<<2 | recovered<<1 | 1   (odd)
//	not granted: remaining_microseconds<<1     (even)
//
// recovered is 1 when the previous lease ended without a release (expired
// or broken: owner still set). The ON DUPLICATE KEY UPDATE assignments run
// left to right and later ones see the earlier ones' results, so every
// condition tests expires_at, which is assigned last, and token is computed
// before owner changes. The new values are passed again as parameters
// rather than read with VALUES(col): MySQL 8.0.20 deprecates VALUES() there
// in favour of a row alias (INSERT … AS new), which MariaDB does not
// support; parameters work on both.
//
// Parameters: name, owner, holder, bell, ttl_us, then owner, holder, bell,
// ttl_us again.
const acquire = `INSERT INTO {t} (name, owner, token, holder, bell, expires_at)
VALUES (?, ?, LAST_INSERT_ID(5) >> 2, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
	token = IF(expires_at <= UTC_TIMESTAMP(6),
		LAST_INSERT_ID((token + 1) << 2 | (owner IS NOT NULL) << 1 | 1) >> 2,
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

// release frees a live lease of owner; the token stays as the counter.
// Parameters: name, owner.
const release = `UPDATE {t} SET owner = NULL, holder = NULL, bell = NULL, expires_at = '1000-01-01 00:00:00'
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
// Parameters: own bell connection id, bell, bell, cap_seconds, bell, bell,
// name.
const wait = `SELECT CASE
	WHEN l.owner IS NULL OR l.expires_at <= UTC_TIMESTAMP(6) THEN 1
	WHEN l.bell = ? THEN 4
	WHEN IS_USED_LOCK(?) = l.bell THEN 2 + COALESCE(
		GET_LOCK(?, LEAST(?, CEIL(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires_at) / 1000000)))
		AND RELEASE_LOCK(?), 0)
	WHEN l.bell IS NOT NULL AND IS_USED_LOCK(?) IS NULL THEN 5
	ELSE 0 END
FROM (SELECT 1) AS one LEFT JOIN {t} AS l ON l.name = ?`

// queries binds the statements to one table.
type queries struct {
	createTable, acquire, extend, release, breakLease, inspect, list, wait string
}

func newQueries(quotedTable string) queries {
	r := strings.NewReplacer("{t}", quotedTable)
	return queries{
		createTable: r.Replace(createTable),
		acquire:     r.Replace(acquire),
		extend:      r.Replace(extend),
		release:     r.Replace(release),
		breakLease:  r.Replace(breakLease),
		inspect:     r.Replace(inspect),
		list:        r.Replace(list),
		wait:        r.Replace(wait),
	}
}
