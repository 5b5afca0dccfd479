package mysqllock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dlock/dlock/driver"
)

// extendMany is extend for many leases of one TTL at once: {pairs} is a
// list of (name, owner) placeholders, of one of the batchSlots lengths,
// so that a few prepared statements serve every batch; a batch shorter
// than its list fills the rest with an empty name, which no lease has.
// Parameters: ttl_us, bell, then name, owner of each pair.
const extendMany = `UPDATE {t} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, bell = ?
WHERE (name, owner) IN ({pairs}) AND expires_at > UTC_TIMESTAMP(6)`

// heldMany reads which of many leases are live and their owners'. After an
// extendMany that renewed fewer leases than it was given, those are the
// ones it renewed: a lease it did not renew had ended, and an ended lease
// never becomes live again under the same owner. Parameters: as
// extendMany's pairs.
const heldMany = `SELECT name, owner FROM {t} WHERE (name, owner) IN ({pairs}) AND expires_at > UTC_TIMESTAMP(6)`

// batchSlots are the lengths of extendMany's lists: a batch takes the
// shortest that holds it.
var batchSlots = [...]int{16, 64, driver.MaxBatch}

// manyQueries binds extendMany and heldMany, at each of batchSlots, to
// the table r names.
func manyQueries(r *strings.Replacer) (extend, held [len(batchSlots)]string) {
	for k, n := range batchSlots {
		pairs := strings.TrimSuffix(strings.Repeat("(?, ?), ", n), ", ")
		extend[k] = strings.ReplaceAll(r.Replace(extendMany), "{pairs}", pairs)
		held[k] = strings.ReplaceAll(r.Replace(heldMany), "{pairs}", pairs)
	}
	return extend, held
}

// ExtendBatch implements driver.BatchExtender: the mutex leases of b that
// share a TTL are renewed by one statement per driver.MaxBatch of them,
// and when it renews fewer than it was given, one more statement reads
// which it renewed. Semaphore permits are renewed one by one.
func (d *Driver) ExtendBatch(ctx context.Context, b []driver.Extension) []error {
	errs := make([]error, len(b))
	alone := func(e driver.Extension) bool {
		_, ok := e.Held.Handle.(permit)
		return ok
	}
	one := func(e driver.Extension) error { return d.Extend(ctx, e.Held, e.TTL) }
	driver.ExtendGroups(b, errs, alone, one, func(idx []int, ttl time.Duration) {
		d.extendMany(ctx, b, idx, ttl, errs)
	})
	return errs
}

// extendMany renews the leases b[idx] (2 to driver.MaxBatch, all of TTL
// ttl) and sets their errs.
func (d *Driver) extendMany(ctx context.Context, b []driver.Extension, idx []int, ttl time.Duration, errs []error) {
	k := 0
	for batchSlots[k] < len(idx) {
		k++
	}
	pairs := make([]any, 0, 2*batchSlots[k])
	for _, i := range idx {
		pairs = append(pairs, []byte(b[i].Held.Name), b[i].Held.Owner)
	}
	for range batchSlots[k] - len(idx) {
		pairs = append(pairs, []byte{}, "")
	}
	sent := driver.Now()
	renewed, err := d.renewMany(ctx, k, ttl, pairs, len(idx))
	for _, i := range idx {
		h := b[i].Held
		bell := bellName(d.table, h.Name)
		switch {
		case err != nil:
			errs[i] = err
		case renewed != nil && !renewed.Has(h):
			d.bells.drop(bell, h.Owner)
			errs[i] = fmt.Errorf("%w: mysqllock: %q is no longer held by this owner", driver.ErrLeaseLost, h.Name)
		default:
			d.bells.extend(bell, h.Owner, sent.Add(ttl))
		}
	}
}

// renewMany runs extendMany at batchSlots[k] with pairs, of which n are
// leases. It returns a nil set when it renewed all n, else the set of
// those it renewed.
func (d *Driver) renewMany(ctx context.Context, k int, ttl time.Duration, pairs []any, n int) (driver.Renewed, error) {
	r, err := exec(ctx, d, d.q.extendMany[k], append([]any{micros(ttl), d.bellArg(ctx)}, pairs...)...)
	if err != nil {
		return nil, err
	}
	if got, err := r.RowsAffected(); err != nil {
		return nil, d.fail(ctx, err)
	} else if got == int64(n) {
		return nil, nil
	}
	s, err := d.stmt(ctx, d.q.heldMany[k])
	if err != nil {
		return nil, err
	}
	octx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := s.QueryContext(octx, pairs...)
	if err != nil {
		return nil, d.fail(ctx, err)
	}
	defer rows.Close()
	renewed := driver.Renewed{}
	for rows.Next() {
		var name []byte
		var owner string
		if err := rows.Scan(&name, &owner); err != nil {
			return nil, d.fail(ctx, err)
		}
		renewed.Add(string(name), owner)
	}
	if err := rows.Err(); err != nil {
		return nil, d.fail(ctx, err)
	}
	return renewed, nil
}
