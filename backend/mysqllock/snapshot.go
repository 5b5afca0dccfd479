package mysqllock

import (
	"context"
	"errors"

	"github.com/go-sql-driver/mysql"
)

// The statements are written for InnoDB's locking reads: a statement that
// changes rows, or reads them FOR UPDATE, acts on their newest committed
// versions, whatever its snapshot, at REPEATABLE READ (the default) as
// at READ COMMITTED. MariaDB's innodb_snapshot_isolation (10.6.18 and
// later; on by default from 11.6.2, so in the 11.8 LTS) instead fails
// such a statement with error 1020 ("Record has changed since last
// read") when a row it locks changed after its snapshot was taken, which
// under contention is often. Every statement therefore runs with it off,
// for that statement alone (SET STATEMENT … FOR), on a server that has
// the variable; the session's setting is left as it is.

// snapshotOffPrefix turns innodb_snapshot_isolation off for the statement
// it precedes.
const snapshotOffPrefix = "SET STATEMENT innodb_snapshot_isolation=OFF FOR "

// own returns query as the driver runs it: after snapshotOffPrefix on a
// server that has innodb_snapshot_isolation, as it is otherwise (MySQL,
// older MariaDB). The server is asked once.
func (d *Driver) own(ctx context.Context, query string) (string, error) {
	d.mu.Lock()
	known, prefix := d.snapshotKnown, d.snapshotPrefix
	d.mu.Unlock()
	if !known {
		octx, cancel := d.bound(ctx)
		var on any
		err := d.db.QueryRowContext(octx, "SELECT @@innodb_snapshot_isolation").Scan(&on)
		cancel()
		var me *mysql.MySQLError
		switch {
		case err == nil:
			prefix = snapshotOffPrefix
		case errors.As(err, &me) && me.Number == 1193: // unknown system variable
			prefix = ""
		default:
			return "", d.fail(ctx, err)
		}
		d.mu.Lock()
		d.snapshotKnown, d.snapshotPrefix = true, prefix
		d.mu.Unlock()
	}
	return prefix + query, nil
}
