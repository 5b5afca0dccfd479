package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/driver"
)

// ExtendBatch implements driver.BatchExtender: the mutex leases of b are
// renewed by the same owner-checked script as Extend's, all in one
// pipeline (one round trip, one per node of a cluster). Semaphore permits
// and readers' leases are renewed one by one.
func (d *Driver) ExtendBatch(ctx context.Context, b []driver.Extension) []error {
	errs := make([]error, len(b))
	idx := make([]int, 0, len(b))
	keys := make([]*redisscript.Keys, 0, len(b))
	owners := make([]string, 0, len(b))
	ttls := make([]time.Duration, 0, len(b))
	for i, e := range b {
		if _, ok := e.Held.Handle.(permit); ok {
			errs[i] = d.Extend(ctx, e.Held, e.TTL)
			continue
		}
		idx = append(idx, i)
		keys = append(keys, d.heldKeys(e.Held))
		owners = append(owners, e.Held.Owner)
		ttls = append(ttls, e.TTL)
	}
	if len(idx) == 0 {
		return errs
	}
	held, es := redisscript.ExtendMany(ctx, d.rdb, keys, owners, ttls)
	for k, i := range idx {
		switch {
		case es[k] != nil:
			errs[i] = d.unavailable(ctx, es[k])
		case !held[k]:
			errs[i] = fmt.Errorf("%w: redis: %q is no longer held by this owner", driver.ErrLeaseLost, b[i].Held.Name)
		}
	}
	return errs
}
