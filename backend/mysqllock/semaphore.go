package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock/dlock/driver"
)

// Semaphores: driver.Request.Limit > 1 (see queries.go and the package
// doc). The mutex's statements and round trips are not touched: a request
// with Limit <= 1 never reaches this file, and Extend and Release tell a
// permit by its Handle.

// permit is the Grant.Handle of a semaphore's permit.
type permit struct{}

// permitSuffix names the permit table after the lease table.
const permitSuffix = "_permits"

// permitTable is the permit table's name (sideTable).
func permitTable(table string) string { return sideTable(table, permitSuffix) }

// sideTable names a table kept beside the lease table: the lease table's
// name with suffix appended, if that fits MySQL's 64-character limit on
// identifiers; otherwise the first characters of the lease table's name,
// "_", 8 hex digits of a hash of the whole name, and suffix (64
// characters), so that two long lease-table names that share a beginning
// still get side tables of their own.
func sideTable(table, suffix string) string {
	r := []rune(table)
	if len(r)+len(suffix) <= 64 {
		return table + suffix
	}
	return string(r[:64-len(suffix)-9]) + "_" + driver.NameHash(table)[:8] + suffix
}

// permitBellPrefix is what permitBell hashes before the token: the table, a
// NUL, the lock name and 0xFF, a byte that valid UTF-8 (every lock name) never
// holds, so no mutex's bell input (table, NUL, name) is ever equal to a
// permit's. permitWait computes the same hash on the server.
func permitBellPrefix(table, name string) []byte {
	return []byte(table + "\x00" + name + "\xff")
}

// permitBell is the bell of the permit of name with token: one per permit,
// so that a waiter woken by it knows that this permit ended (a driver may
// hold several permits of a name).
func permitBell(table, name string, token uint64) string {
	return "dlock:" + driver.NameHash(string(permitBellPrefix(table, name))+strconv.FormatUint(token, 10))
}

// tryPermit is TryAcquire for a semaphore: one transaction (see
// queries.go), run again if InnoDB picks it as a deadlock victim.
func (d *Driver) tryPermit(ctx context.Context, req driver.Request) (driver.Grant, time.Duration, error) {
	return d.tryPermitQueued(ctx, req, notQueued)
}

// tryPermitQueued is tryPermit; a fair request (Request.Fair) is granted
// only while the live permits and the live waiters queued ahead of seq
// (notQueued: all of them) are fewer than its limit.
func (d *Driver) tryPermitQueued(ctx context.Context, req driver.Request, seq int64) (driver.Grant, time.Duration, error) {
	var st [5]*sql.Stmt
	queries := []string{d.q.permitCounter, d.q.permitCount, d.q.permitReuse, d.q.permitGrant}
	if req.Fair {
		queries = append(queries, d.q.queueAhead)
	}
	for i, q := range queries {
		s, err := d.stmt(ctx, q) // creates the tables if needed
		if err != nil {
			return driver.Grant{}, 0, err
		}
		st[i] = s
	}
	bellArg := d.bellArg(ctx)
	octx, cancel := d.bound(ctx)
	defer cancel()
	for try := 1; ; try++ {
		sent := driver.Now()
		g, left, err := d.permitTx(octx, st, req, bellArg, seq)
		var me *mysql.MySQLError
		if try < 5 && errors.As(err, &me) && me.Number == 1213 {
			continue
		}
		if err != nil {
			return driver.Grant{}, 0, d.fail(ctx, err)
		}
		if g.Token == 0 {
			d.attemptFailed(req.Name, true)
			return driver.Grant{}, left, driver.ErrNotAcquired
		}
		d.bells.hold(permitBell(d.table, req.Name, g.Token), req.Owner, sent.Add(req.TTL), true)
		g.Since = sent
		return g, 0, nil
	}
}

// permitTx runs one grant transaction. A refusal is a zero Grant and the
// time left on the live permit that expires first.
func (d *Driver) permitTx(ctx context.Context, st [5]*sql.Stmt, req driver.Request, bellArg any, seq int64) (g driver.Grant, left time.Duration, err error) {
	name := []byte(req.Name)
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return g, 0, err
	}
	defer func() {
		if g.Token == 0 || err != nil {
			_ = tx.Rollback()
			g = driver.Grant{}
		}
	}()
	r, err := tx.StmtContext(ctx, st[0]).ExecContext(ctx, name)
	if err != nil {
		return g, 0, err
	}
	token, err := r.LastInsertId()
	if err != nil {
		return g, 0, err
	}
	var live, ended, lost, leftUS int64
	if err := tx.StmtContext(ctx, st[1]).QueryRowContext(ctx, name).Scan(&live, &ended, &lost, &leftUS); err != nil {
		return g, 0, err
	}
	if live >= int64(req.Limit) {
		return g, time.Duration(leftUS) * time.Microsecond, nil
	}
	if req.Fair {
		var ahead int64
		if err := tx.StmtContext(ctx, st[4]).QueryRowContext(ctx, name, seq).Scan(&ahead); err != nil {
			return g, 0, err
		}
		if live+ahead >= int64(req.Limit) {
			return g, 0, nil
		}
	}
	if ended > 0 {
		r, err = tx.StmtContext(ctx, st[2]).ExecContext(ctx, uint64(token), req.Owner, req.Holder, bellArg, micros(req.TTL), name)
	} else {
		r, err = tx.StmtContext(ctx, st[3]).ExecContext(ctx, name, uint64(token), req.Owner, req.Holder, bellArg, micros(req.TTL))
	}
	if err != nil {
		return g, 0, err
	}
	if n, err := r.RowsAffected(); err != nil {
		return g, 0, err
	} else if n != 1 {
		return g, 0, fmt.Errorf("mysqllock: permit grant wrote %d rows, want 1", n)
	}
	if err := tx.Commit(); err != nil {
		return g, 0, err
	}
	return driver.Grant{Token: uint64(token), Recovered: lost > 0, Handle: permit{}}, 0, nil
}

// extendPermit is Extend for a permit.
func (d *Driver) extendPermit(ctx context.Context, h driver.Held, ttl time.Duration) error {
	sent := driver.Now()
	r, err := exec(ctx, d, d.q.permitExtend, micros(ttl), d.bellArg(ctx), []byte(h.Name), h.Token, h.Owner)
	if err != nil {
		return err
	}
	bell := permitBell(d.table, h.Name, h.Token)
	if n, err := r.RowsAffected(); err != nil {
		return d.fail(ctx, err)
	} else if n == 0 {
		d.bells.drop(bell, h.Owner)
		return fmt.Errorf("%w: mysqllock: permit %d of %q is no longer held by this owner", driver.ErrLeaseLost, h.Token, h.Name)
	}
	d.bells.extend(bell, h.Owner, sent.Add(ttl))
	return nil
}

// releasePermit is Release for a permit: it deletes the row, then rings
// the permit's bell and wakes this driver's waiters of the name.
func (d *Driver) releasePermit(ctx context.Context, h driver.Held) error {
	r, err := exec(ctx, d, d.q.permitRelease, []byte(h.Name), h.Token, h.Owner)
	if err != nil {
		return err
	}
	d.bells.drop(permitBell(d.table, h.Name, h.Token), h.Owner)
	d.releasedLocally(h.Name)
	if n, err := r.RowsAffected(); err != nil {
		return d.fail(ctx, err)
	} else if n == 0 {
		return fmt.Errorf("%w: mysqllock: permit %d of %q was no longer held by this owner", driver.ErrLeaseLost, h.Token, h.Name)
	}
	return nil
}

// permitStmt prepares a statement on the permit table for Inspect, List
// and Break, without creating the tables: ok is false when the permit
// table does not exist (a deployment migrated before semaphores, whose
// user may lack CREATE: it has no permits).
func (d *Driver) permitStmt(ctx context.Context, query string) (s *sql.Stmt, ok bool, err error) {
	s, err = d.prepare(ctx, query, false)
	if isNoTable(err) {
		return nil, false, nil
	}
	return s, err == nil, err
}

// inspectPermits is Inspect of a name that is not a held mutex: its live
// permits, if any.
func (d *Driver) inspectPermits(ctx context.Context, name string) (driver.Info, error) {
	in := driver.Info{Name: name}
	s, ok, err := d.permitStmt(ctx, d.q.permitInspect)
	if !ok {
		return in, err
	}
	octx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := s.QueryContext(octx, []byte(name))
	if err != nil {
		return driver.Info{}, d.fail(ctx, err)
	}
	defer rows.Close()
	for rows.Next() {
		var p driver.Permit
		var left int64
		if err := rows.Scan(&p.Token, &p.Holder, &left); err != nil {
			return driver.Info{}, d.fail(ctx, err)
		}
		p.ExpiresIn = time.Duration(left) * time.Microsecond
		in.Permits = append(in.Permits, p)
	}
	if err := rows.Err(); err != nil {
		return driver.Info{}, d.fail(ctx, err)
	}
	fillPermits(&in)
	return in, nil
}

// fillPermits sets the Info's holder fields from its first permit.
func fillPermits(in *driver.Info) {
	if len(in.Permits) > 0 {
		in.Held, in.Token, in.Holder, in.ExpiresIn = true, in.Permits[0].Token, in.Permits[0].Holder, in.Permits[0].ExpiresIn
	}
}

// listPermits is List's part for semaphores: those with a live permit whose
// names start with prefix, by name.
func (d *Driver) listPermits(ctx context.Context, prefix string) ([]driver.Info, error) {
	s, ok, err := d.permitStmt(ctx, d.q.permitList)
	if !ok {
		return nil, err
	}
	p := []byte(prefix)
	octx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := s.QueryContext(octx, p, len(p), p)
	if err != nil {
		return nil, d.fail(ctx, err)
	}
	defer rows.Close()
	var out []driver.Info
	for rows.Next() {
		var name []byte
		var pm driver.Permit
		var left int64
		if err := rows.Scan(&name, &pm.Token, &pm.Holder, &left); err != nil {
			return nil, d.fail(ctx, err)
		}
		pm.ExpiresIn = time.Duration(left) * time.Microsecond
		if n := len(out); n == 0 || out[n-1].Name != string(name) {
			out = append(out, driver.Info{Name: string(name)})
		}
		last := &out[len(out)-1]
		last.Permits = append(last.Permits, pm)
	}
	if err := rows.Err(); err != nil {
		return nil, d.fail(ctx, err)
	}
	for i := range out {
		fillPermits(&out[i])
	}
	return out, nil
}

// mergeByName merges two lists sorted by name into one (byte order, as
// the statements sort VARBINARY names).
func mergeByName(a, b []driver.Info) []driver.Info {
	if len(b) == 0 {
		return a
	}
	out := make([]driver.Info, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if strings.Compare(a[0].Name, b[0].Name) <= 0 {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// breakPermits is Break of a name that is not a held mutex: it ends every
// live permit; ErrNotHeld if there is none.
func (d *Driver) breakPermits(ctx context.Context, name string) error {
	notHeld := fmt.Errorf("%w: mysqllock: %q is free", driver.ErrNotHeld, name)
	if _, ok, err := d.permitStmt(ctx, d.q.permitBreak); !ok {
		if err != nil {
			return err
		}
		return notHeld
	}
	r, err := exec(ctx, d, d.q.permitBreak, []byte(name))
	if err != nil {
		return err
	}
	if n, err := r.RowsAffected(); err != nil {
		return d.fail(ctx, err)
	} else if n == 0 {
		return notHeld
	}
	return nil
}
