package pglock

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlock/dlock/driver"
)

// The statements are written for READ COMMITTED, PostgreSQL's default: a
// statement that waited for a row's lock judges its WHERE again on the
// row's newest version (and those that must not act on a stale read
// check the row's version themselves, rowUnchangedSQL). A session whose
// default_transaction_isolation is REPEATABLE READ or SERIALIZABLE —
// set by the server, the database, the role or the pool — instead fails
// such a statement with a serialization failure (SQLSTATE 40001), and
// fails it whenever the row changed after its snapshot: under contention,
// often. The queue's transactions name their level (underNameLock); the
// statements that run alone go through readCommitted, which runs a
// statement that failed so again, once, in a READ COMMITTED transaction
// of its own (one more round trip, only when it failed). A statement that
// failed so changed nothing.

// readCommitted is a querier whose statements run as READ COMMITTED,
// whatever the session's default level (see above).
type readCommitted struct{ q querier }

func (r readCommitted) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return rcRow{r: r, ctx: ctx, sql: sql, args: args, row: r.q.QueryRow(ctx, sql, args...)}
}

func (r readCommitted) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := r.q.Exec(ctx, sql, args...)
	if !serializationFailure(err) {
		return tag, err
	}
	err = inReadCommitted(ctx, r.q, func(b *pgx.Batch) { b.Queue(sql, args...) }, func(br pgx.BatchResults) error {
		var err error
		tag, err = br.Exec()
		return err
	})
	return tag, err
}

// rcRow is a row of readCommitted.QueryRow: the statement runs again when
// its result is read, if it failed so.
type rcRow struct {
	r    readCommitted
	ctx  context.Context
	sql  string
	args []any
	row  pgx.Row
}

func (x rcRow) Scan(dest ...any) error {
	err := x.row.Scan(dest...)
	if !serializationFailure(err) {
		return err
	}
	return inReadCommitted(x.ctx, x.r.q, func(b *pgx.Batch) { b.Queue(x.sql, x.args...) }, func(br pgx.BatchResults) error {
		return br.QueryRow().Scan(dest...)
	})
}

// serializationFailure reports whether err is SQLSTATE 40001.
func serializationFailure(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40001"
}

// inReadCommitted runs the statements queue adds in one READ COMMITTED
// transaction, in one round trip; read reads their results. A read that
// finds no row (pgx.ErrNoRows) still commits, and that error is
// returned. A transaction that another error left open is rolled back on
// a connection; a pool closes a connection returned in one.
func inReadCommitted(ctx context.Context, q querier, queue func(*pgx.Batch), read func(pgx.BatchResults) error) error {
	b := &pgx.Batch{}
	b.Queue(`BEGIN ISOLATION LEVEL READ COMMITTED`)
	queue(b)
	b.Queue(`COMMIT`)
	br := q.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		err = read(br)
	}
	if err == nil || errors.Is(err, pgx.ErrNoRows) {
		if _, cerr := br.Exec(); cerr != nil {
			err = cerr
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if c, ok := q.(*pgx.Conn); ok && err != nil && !c.IsClosed() && c.PgConn().TxStatus() != 'I' {
		rctx, cancel := driver.CleanupContext(ctx)
		_, _ = c.Exec(rctx, `ROLLBACK`)
		cancel()
	}
	return err
}
