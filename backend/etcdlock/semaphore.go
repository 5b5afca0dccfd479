package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock/dlock/driver"
)

// A semaphore of n permits (driver.Request.Limit = n > 1) is the mutex's
// queue with one rule changed: a key holds while fewer than its own limit
// keys are ahead of it, instead of none. A reader of a read-write lock
// (driver.Request.Shared) holds while no writer's key is ahead of it; a
// writer is the mutex, holding when nothing is ahead, so a reader that
// comes after a waiting writer waits behind it (writer preference). Keys only ever leave the part of
// the queue ahead of a key (a new key gets a higher create revision), so a
// key that holds keeps holding until it goes, the holders are always the
// oldest keys, and grants are made in create-revision order: the tokens,
// create revisions, increase in grant order across all permits.
//
// A waiter cannot watch only the key just ahead, as the mutex's does: the
// deletion of any key ahead of it may be the one that lets it in. It
// watches the whole queue for deletions and counts again after each one,
// so a release wakes every waiter of the semaphore (one read each).

// errCompatCounted refuses a semaphore or read-write lock in
// compat=etcdctl, whose layout (etcd's concurrency.Mutex) has neither.
var errCompatCounted = fmt.Errorf("%w: etcd compat=etcdctl: semaphores and read-write locks are not part of etcdctl's lock layout", driver.ErrUnsupported)

// counted reports whether req takes the queue rules of this file rather
// than the mutex's.
func counted(req driver.Request) bool { return req.Limit > 1 || req.Shared }

// queueRead returns the options of the read, in the transaction that puts
// a counted request's key, of what it needs to know whether it holds: the
// keys at the head of the queue with their values (a semaphore's first
// Limit, a reader's whole queue), in create-revision order.
func queueRead(req driver.Request) []clientv3.OpOption {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}
	if req.Shared {
		return opts
	}
	return append(opts, clientv3.WithLimit(int64(req.Limit)))
}

// holdsAt reports whether the key created at rev holds in queue, the keys
// read by queueRead in the transaction that created it.
func holdsAt(queue []*mvccpb.KeyValue, rev int64) bool {
	i := slices.IndexFunc(queue, func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision == rev })
	holders, _, _ := permits(queue[:i+1])
	return i >= 0 && len(holders) == i+1
}

// waitPermit returns when hd's key holds in queue pfx (see permits), or
// with an error when ctx ends or the key or its lease is lost. While it
// waits, keepQueued renews the lease that keeps our key alive.
func (d *Driver) waitPermit(ctx context.Context, pfx string, hd *holding) error {
	kctx, stopKeep := context.WithCancel(ctx)
	defer stopKeep()
	leaseErr := d.keepQueued(kctx, hd.lease)

	for failures := 0; ; {
		retry, err := d.awaitPermit(ctx, pfx, hd, leaseErr)
		if !retry {
			return err
		}
		// The watch broke (no leader, compaction) or a read failed: try
		// again until ctx ends or our lease runs out.
		failures++
		if err := pauseQueued(ctx, leaseErr, failures); err != nil {
			return err
		}
	}
}

// awaitPermit watches queue pfx for deletions, then reads the queue up to
// hd's key at the watch's start revision or later, and again after every
// deletion, until hd's key holds. Starting the watch first
// leaves no gap: a deletion after its start is an event, one before it is
// in the count. It reports retry when the server could not be read or the
// watch broke (no leader, compaction), and the caller should start again.
func (d *Driver) awaitPermit(ctx context.Context, pfx string, hd *holding, leaseErr <-chan error) (retry bool, err error) {
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
		holds, err := d.holdsNow(ctx, pfx, hd, atLeast)
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		switch {
		case errors.Is(err, errEntryLost):
			return false, err
		case err != nil:
			return true, err
		case holds:
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
		case <-hd.gone.Done():
			return false, errEntryLost
		case err := <-leaseErr:
			return false, err
		}
	}
}

// holdsNow reports whether hd's key holds in queue pfx, read in a state at
// revision atLeast or later: the queue up to and with hd's key, with the
// values, in create-revision order (see permits). As ahead does for the
// mutex, the same read checks that hd's own key still exists.
func (d *Driver) holdsNow(ctx context.Context, pfx string, hd *holding, atLeast int64) (bool, error) {
	resp, err := d.readAtLeast(ctx, atLeast, pfx, clientv3.WithPrefix(), clientv3.WithMaxCreateRev(hd.rev),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return false, err
	}
	kvs := resp.Kvs
	if len(kvs) == 0 || kvs[len(kvs)-1].CreateRevision != hd.rev || string(kvs[len(kvs)-1].Key) != hd.key {
		return false, errEntryLost
	}
	return holdsAt(kvs, hd.rev), nil
}

// permits splits a queue, in create-revision order, into the keys that
// hold and those that wait, by driver.QueueHolders (each key's value
// records how it was asked for), and reports whether any is a semaphore's
// or a reader's, whose holders Inspect lists as permits.
func permits(queue []*mvccpb.KeyValue) (holders, waiters []*mvccpb.KeyValue, multiple bool) {
	held, _ := driver.QueueHolders(len(queue), func(i int) ([]byte, error) { return queue[i].Value, nil })
	multiple = slices.ContainsFunc(queue[:held], func(kv *mvccpb.KeyValue) bool {
		return driver.HolderLimit(kv.Value) > 1 || driver.HolderShared(kv.Value)
	})
	return queue[:held], queue[held:], multiple
}
