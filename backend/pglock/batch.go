package pglock

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock/dlock/driver"
)

// ExtendBatch implements driver.BatchExtender: the leases of b held by
// their rows (not by a session's advisory lock) that share a TTL are
// renewed by one statement, which returns those it renewed. Session-held
// locks and semaphore permits are renewed one by one.
func (d *Driver) ExtendBatch(ctx context.Context, b []driver.Extension) []error {
	errs := make([]error, len(b))
	alone := func(e driver.Extension) bool {
		switch e.Held.Handle.(type) {
		case *session, permit:
			return true
		}
		return false
	}
	one := func(e driver.Extension) error { return d.Extend(ctx, e.Held, e.TTL) }
	driver.ExtendGroups(b, errs, alone, one, func(idx []int, ttl time.Duration) {
		renewed, err := d.extendMany(ctx, b, idx, ttl)
		for _, i := range idx {
			h := b[i].Held
			switch {
			case err != nil:
				errs[i] = err
			case !renewed.Has(h):
				errs[i] = fmt.Errorf("%w: %q expired or was taken over", driver.ErrLeaseLost, h.Name)
			}
		}
	})
	return errs
}

// extendMany renews the leases b[idx], all of TTL ttl, and returns the set
// of those it renewed.
func (d *Driver) extendMany(ctx context.Context, b []driver.Extension, idx []int, ttl time.Duration) (driver.Renewed, error) {
	names, owners := make([][]byte, len(idx)), make([]string, len(idx))
	for k, i := range idx {
		names[k], owners[k] = []byte(b[i].Held.Name), b[i].Held.Owner
	}
	octx, cancel := d.bound(ctx)
	defer cancel()
	args := []any{names, owners, ttl.Microseconds()}
	renewed := make(driver.Renewed, len(idx))
	rows, err := d.pool.Query(octx, d.extendManySQL, args...)
	if err == nil {
		err = collectRenewed(rows, renewed)
	}
	if serializationFailure(err) { // see readCommitted
		clear(renewed)
		err = inReadCommitted(octx, d.pool, func(b *pgx.Batch) { b.Queue(d.extendManySQL, args...) }, func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			return collectRenewed(rows, renewed)
		})
	}
	if err != nil {
		return nil, d.fail(ctx, err)
	}
	return renewed, nil
}

// collectRenewed adds the leases extendManySQL's rows name to renewed.
func collectRenewed(rows pgx.Rows, renewed driver.Renewed) error {
	defer rows.Close()
	var name []byte
	var owner string
	for rows.Next() {
		if err := rows.Scan(&name, &owner); err != nil {
			return err
		}
		renewed.Add(string(name), owner)
	}
	return rows.Err()
}
