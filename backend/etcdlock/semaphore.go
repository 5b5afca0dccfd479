package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock/dlock/driver"
)

// A semaphore of n permits (driver.Request.Limit = n > 1) is the mutex's
// queue with one rule changed: a key holds while fewer than its own limit
// keys are ahead of it, instead of none. Keys only ever leave the part of
// the queue ahead of a key (a new key gets a higher create revision), so a
// key that holds keeps holding until it goes, the holders are always the
// oldest keys, and grants are made in create-revision order: the tokens,
// create revisions, increase in grant order across all permits.
//
// A waiter cannot watch only the key just ahead, as the mutex's does: the
// deletion of any key ahead of it may be the one that lets it in. It
// watches the whole queue for deletions and counts again after each one,
// so a release wakes every waiter of the semaphore (one read each).

// errCompatSemaphore refuses a semaphore in compat=etcdctl, whose layout
// (etcd's concurrency.Mutex) has no counted leases.
var errCompatSemaphore = fmt.Errorf("%w: etcd compat=etcdctl: semaphores are not part of etcdctl's lock layout", driver.ErrUnsupported)

// firstPermits returns the options of a read of the first n keys of a
// queue, in create-revision order.
func firstPermits(n int) []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend),
		clientv3.WithLimit(int64(n)), clientv3.WithKeysOnly()}
}

// holdsPermit reports whether the key created at rev is among first, the
// first keys of its queue read in the transaction that created it.
func holdsPermit(first []*mvccpb.KeyValue, rev int64) bool {
	for _, kv := range first {
		if kv.CreateRevision == rev {
			return true
		}
	}
	return false
}

// waitPermit returns when fewer than limit keys are ahead of hd's in queue
// pfx, or with an error when ctx ends or the key or its lease is lost.
// While it waits, keepQueued renews the lease that keeps our key alive.
func (d *Driver) waitPermit(ctx context.Context, pfx string, hd *holding, limit int) error {
	kctx, stopKeep := context.WithCancel(ctx)
	defer stopKeep()
	leaseErr := d.keepQueued(kctx, hd.lease)

	for failures := 0; ; {
		retry, err := d.awaitPermit(ctx, pfx, hd, limit, leaseErr)
		if !retry {
			return err
		}
		// The watch broke (no leader, compaction) or a read failed: try
		// again until ctx ends or our lease runs out.
		failures++
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-leaseErr:
			return err
		case <-time.After(retryBackoff.Delay(failures - 1)):
		}
	}
}

// awaitPermit watches queue pfx for deletions, then counts the keys ahead
// of hd's at the watch's start revision or later, and again after every
// deletion, until fewer than limit are ahead. Starting the watch first
// leaves no gap: a deletion after its start is an event, one before it is
// in the count. It reports retry when the server could not be read or the
// watch broke (no leader, compaction), and the caller should start again.
func (d *Driver) awaitPermit(ctx context.Context, pfx string, hd *holding, limit int, leaseErr <-chan error) (retry bool, err error) {
	wctx, cancel := context.WithCancel(d.watchCtx(ctx))
	defer cancel()
	wch := d.cli.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
	var atLeast int64
	select {
	case wr, ok := <-wch:
		if !ok || wr.Err() != nil || !wr.Created {
			return ctx.Err() == nil, ctx.Err()
		}
		atLeast = max(wr.Header.Revision, hd.rev)
	case <-ctx.Done():
		return false, ctx.Err()
	}
	for {
		ahead, err := d.countAhead(ctx, pfx, hd, limit, atLeast)
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		switch {
		case errors.Is(err, errEntryLost):
			return false, err
		case err != nil:
			return true, err
		case ahead < limit:
			return false, nil
		}
		select {
		case wr, ok := <-wch:
			at, broken := deletion(wr, ok)
			if broken {
				return true, nil
			}
			atLeast = max(atLeast, at)
		case <-ctx.Done():
			return false, ctx.Err()
		case <-hd.lost.gone.Done():
			return false, errEntryLost
		case err := <-leaseErr:
			return false, err
		}
	}
}

// countAhead returns how many keys are ahead of hd's in queue pfx, up to
// limit, in a state at revision atLeast or later. As ahead does for the
// mutex, the same read checks that hd's own key still exists.
func (d *Driver) countAhead(ctx context.Context, pfx string, hd *holding, limit int, atLeast int64) (int, error) {
	resp, err := d.readAtLeast(ctx, atLeast, pfx, clientv3.WithPrefix(),
		clientv3.WithMaxCreateRev(hd.rev),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
		clientv3.WithLimit(int64(limit)+1), clientv3.WithKeysOnly())
	if err != nil {
		return 0, err
	}
	kvs := resp.Kvs
	if len(kvs) == 0 || kvs[0].CreateRevision != hd.rev || string(kvs[0].Key) != hd.key {
		return 0, errEntryLost
	}
	return len(kvs) - 1, nil
}

// permits splits a queue, in create-revision order, into the keys that
// hold and those that wait: the key at place i holds if i is below the
// limit it was granted with (driver.HolderLimit of its value).
func permits(queue []*mvccpb.KeyValue) (holders, waiters []*mvccpb.KeyValue, semaphore bool) {
	for i, kv := range queue {
		n := driver.HolderLimit(kv.Value)
		semaphore = semaphore || n > 1
		if i < n && len(waiters) == 0 {
			holders = append(holders, kv)
		} else {
			waiters = append(waiters, kv)
		}
	}
	return holders, waiters, semaphore
}
