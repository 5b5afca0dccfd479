package etcdlock

import (
	"context"
	"fmt"
	"sync"
	"time"

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
	gone   bool // the key was already gone (or replaced) when the watch began
}

// watchDeletion watches key, which a read at revision seenRev found with
// create revision createRev, for its deletion. It returns once the watch is
// established; w.gone reports that the key is already gone.
func (d *Driver) watchDeletion(ctx context.Context, key string, createRev, seenRev int64) (*syncedWatch, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	w := &syncedWatch{cancel: cancel}
	w.ch = d.cli.Watch(wctx, key, clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
	var created clientv3.WatchResponse
	select {
	case wr, ok := <-w.ch:
		if !ok || wr.Err() != nil || !wr.Created {
			cancel()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("%w: etcd watch: %v", driver.ErrUnavailable, wr.Err())
		}
		created = wr
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
	if created.Header.Revision == seenRev {
		return w, nil // nothing happened between the read and the watch
	}
	resp, err := d.cli.Get(wctx, key, clientv3.WithKeysOnly())
	if err != nil {
		cancel()
		return nil, unavailable(ctx, "get", err)
	}
	w.gone = len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != createRev
	return w, nil
}

// waitDelete waits for the watched key's deletion. It returns deleted=false
// with a nil error when the watch broke and the caller should look again.
func (w *syncedWatch) waitDelete(ctx context.Context, ownGone <-chan struct{}, leaseErr <-chan error) (deleted bool, err error) {
	for {
		select {
		case wr, ok := <-w.ch:
			if !ok || wr.Err() != nil {
				return false, nil
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return true, nil
				}
			}
		case <-ctx.Done():
			return false, ctx.Err()
		case <-ownGone:
			return false, fmt.Errorf("%w: our queue entry was deleted while waiting (lease expired or key removed)", driver.ErrUnavailable)
		case err := <-leaseErr:
			return false, err
		}
	}
}

// keyWatch reports the deletion of one's own key: a Break, an expired
// lease, or a manual delete. gone is Grant.Lost.
type keyWatch struct {
	gone   chan struct{}
	cancel context.CancelFunc

	mu      sync.Mutex
	stopped bool
}

// watchKey starts watching key (created at revision rev; seenRev is the
// revision of a read that saw it) until stop is called.
func (d *Driver) watchKey(key string, rev, seenRev int64) *keyWatch {
	ctx, cancel := context.WithCancel(context.Background())
	kw := &keyWatch{gone: make(chan struct{}), cancel: cancel}
	go func() {
		for failures := 0; ctx.Err() == nil; {
			w, err := d.watchDeletion(ctx, key, rev, seenRev)
			if err != nil {
				failures++
				select {
				case <-ctx.Done():
				case <-time.After(retryDelay(failures)):
				}
				continue
			}
			failures = 0
			deleted := w.gone
			if !deleted {
				deleted, _ = w.waitDelete(ctx, nil, nil)
			}
			w.cancel()
			if deleted {
				kw.fire()
				return
			}
			// The watch broke (no leader, member down, compaction):
			// whatever happened meanwhile, the next watch's read tells.
			seenRev = -1
		}
	}()
	return kw
}

// fire closes gone unless the watch was stopped first.
func (kw *keyWatch) fire() {
	kw.mu.Lock()
	defer kw.mu.Unlock()
	if !kw.stopped {
		close(kw.gone)
		kw.stopped = true
	}
}

// stop ends the watch; gone will not be closed after stop returns unless it
// was already.
func (kw *keyWatch) stop() {
	kw.mu.Lock()
	kw.stopped = true
	kw.mu.Unlock()
	kw.cancel()
}
