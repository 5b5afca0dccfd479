package etcdlock

import (
	"context"
	"errors"
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

// keyWatch reports the deletion of one's own key: a Break, an expired
// lease, or a manual delete. gone is Grant.Lost.
type keyWatch struct {
	gone   *driver.Signal
	cancel context.CancelFunc
	timer  *time.Timer

	mu      sync.Mutex
	stopped bool
}

// keyWatchDelay is how long a key lives before its watch begins.
const keyWatchDelay = 50 * time.Millisecond

// watchKey watches our own key, created at revision rev, until stop.
//
// The watch begins keyWatchDelay after the key was created, from revision
// rev+1, so it misses nothing: a lock held for less than that (the common
// case under contention) costs no watch at all. Starting in the past, the
// watch may wait for etcd's 100 ms catch-up loop before it is live, so a
// Break is reported within about 150 ms — and Extend checks the key too.
func (d *Driver) watchKey(key string, rev int64) *keyWatch {
	// Closing the client ends the watch too.
	ctx, cancel := context.WithCancel(d.watchCtx(d.cli.Ctx()))
	kw := &keyWatch{gone: driver.NewSignal(), cancel: cancel}
	kw.timer = time.AfterFunc(keyWatchDelay, func() {
		from := rev + 1
		for failures := 0; ctx.Err() == nil; {
			wch := d.cli.Watch(ctx, key, clientv3.WithRev(from), clientv3.WithFilterPut())
			for wr := range wch {
				if at, broken := deletion(wr, true); at > 0 {
					kw.fire()
					cancel()
					return
				} else if broken {
					break
				}
				failures = 0
			}
			if ctx.Err() != nil {
				return
			}
			// The watch ended (compaction, or a server error): look at
			// the key, and watch again from that read.
			resp, err := d.cli.Get(ctx, key, clientv3.WithKeysOnly())
			switch {
			case err != nil:
				failures++
				select {
				case <-ctx.Done():
				case <-time.After(retryBackoff.Delay(failures - 1)):
				}
			case len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != rev:
				kw.fire()
				cancel()
				return
			default:
				from = resp.Header.Revision + 1
			}
		}
	})
	return kw
}

// fire fires gone unless the watch was stopped first.
func (kw *keyWatch) fire() {
	kw.mu.Lock()
	defer kw.mu.Unlock()
	if !kw.stopped {
		kw.gone.Fire()
		kw.stopped = true
	}
}

// stop ends the watch; gone will not fire after stop returns unless it
// was already.
func (kw *keyWatch) stop() {
	kw.mu.Lock()
	kw.stopped = true
	kw.mu.Unlock()
	kw.timer.Stop()
	kw.cancel()
}
