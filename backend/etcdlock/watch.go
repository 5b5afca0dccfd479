package etcdlock

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock/dlock/driver"
)

// Why the watches here start at "now" and then check.
//
// concurrency.Mutex watches the key ahead from the revision of its last
// read. By the time the watch reaches the server, other writes have usually
// moved the store past that revision, and etcd treats a watch that starts in
// the past as "unsynced": it is caught up by a loop that runs only every
// 100 ms, so a release is seen on average tens of milliseconds late. A
// watch without a start revision starts at the server's current revision
// and is synced at once, so a release is pushed the moment it commits. The
// price is a gap between the read and the watch: the watch's created
// response carries the revision it starts after, and when that is not the
// read's revision, one more read tells whether the key went away in the gap.

// syncedWatch is a watch for the deletion of one key, started without
// missing any event after a read that saw the key.
type syncedWatch struct {
	ch     clientv3.WatchChan
	cancel context.CancelFunc
	gone   bool  // the key was already gone (or replaced) when the watch began
	goneAt int64 // the revision of the read that found it gone
}

// watchDeletion watches key, which a read at revision seenRev found with
// create revision createRev, for its deletion. It returns once the watch is
// established; w.gone reports that the key is already gone.
func (d *Driver) watchDeletion(ctx context.Context, key string, createRev, seenRev int64) (*syncedWatch, error) {
	wctx, cancel := context.WithCancel(d.watchCtx(ctx))
	w := &syncedWatch{cancel: cancel}
	w.ch = d.cli.Watch(wctx, key, clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
	var created clientv3.WatchResponse
	select {
	case wr, ok := <-w.ch:
		if !ok || wr.Err() != nil || !wr.Created {
			cancel()
			err := wr.Err()
			if err == nil {
				err = errors.New("the watch ended before it was created")
			}
			return nil, driver.Classify(ctx, "etcd watch", err)
		}
		created = wr
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
	if created.Header.Revision == seenRev {
		return w, nil // nothing happened between the read and the watch
	}
	resp, err := d.readAtLeast(wctx, created.Header.Revision, key, clientv3.WithKeysOnly())
	if err != nil {
		cancel()
		return nil, err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != createRev {
		w.gone, w.goneAt = true, resp.Header.Revision
	}
	return w, nil
}

// deletion reads one response of a deletion watch: the revision of the
// deletion if it reports one, or broken if the watch ended (no leader,
// compaction, cancel) and its key must be looked at again.
func deletion(wr clientv3.WatchResponse, ok bool) (rev int64, broken bool) {
	if !ok || wr.Err() != nil || wr.Canceled {
		return 0, true
	}
	for _, ev := range wr.Events {
		if ev.Type == mvccpb.DELETE {
			return ev.Kv.ModRevision, false
		}
	}
	return 0, false
}
