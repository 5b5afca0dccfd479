package etcdlock

import (
	"context"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock/dlock/driver"
)

// Why held keys are watched on a stream of the driver's own.
//
// A grant's Lost reports the deletion of its key: a Break, an expired
// lease, a manual delete. etcd's client runs a goroutine for every watch
// (and the caller one more to read its channel), so a watch per held key
// made each held lock cost two goroutines and some 4 KiB. The driver
// instead opens one gRPC watch stream of its own and reads it with one
// goroutine; every held key has a watch on that stream, named by an ID
// the driver picks, and each response is dispatched by that ID. A client
// receives only the deletions of the keys it holds, however busy the
// prefix is: a single watch over the prefix would have pushed every
// release of every client to every client holding a lock.
//
// A key's watch starts keyWatchDelay after its grant (for a semaphore's
// or a reader's key, after its creation), at the revision after the key's
// creation, so it misses nothing, and a lock held for less than that (the
// common case under contention) costs no watch at all, however long it
// waited. Starting in the past, a watch may wait for etcd's 100 ms catch-up
// loop before it is live, so a Break is reported within about 150 ms; and
// Extend checks the key too. When the stream ends (a member without a
// leader, a restart, a lost connection), every watch is created again on a
// new stream from the same revision; a watch whose start etcd has
// compacted away is ended by etcd, and the key is read instead, then
// watched again from that read.

// keyWatchDelay is how long a key lives before its watch begins.
const keyWatchDelay = 50 * time.Millisecond

// lossWatch watches the keys of a driver's grants for their deletion.
type lossWatch struct {
	d *Driver

	mu      sync.Mutex
	ctx     context.Context // ends with the driver; nil until the first add
	stop    context.CancelFunc
	closed  bool
	running bool                           // run has started
	stream  etcdserverpb.Watch_WatchClient // nil while there is none
	nextID  int64                          // the last watch ID given; etcd takes 0 as "pick one"
	watched map[int64]*holding             // by watch ID
	due     []dueKey                       // keys not yet watched, oldest first
	timer   *time.Timer                    // fires when due's first key is due

	sendMu sync.Mutex // a gRPC stream takes one Send at a time
}

// ended is the watch ID of a key released or lost: watched no more.
const ended = -1

// dueKey is a held key whose watch begins at a time.
type dueKey struct {
	hd *holding
	at time.Time
}

// add watches hd's key, created at revision hd.rev and granted now, from
// keyWatchDelay on, until remove or its deletion, which fires hd.gone.
func (w *lossWatch) add(hd *holding) {
	hd.from = hd.rev + 1
	at := driver.Now().Add(keyWatchDelay)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if w.ctx == nil {
		w.ctx, w.stop = context.WithCancel(w.d.cli.Ctx())
		w.watched = map[int64]*holding{}
	}
	w.due = append(w.due, dueKey{hd, at})
	if w.timer == nil {
		w.timer = driver.AfterFunc(keyWatchDelay, w.startDue)
	} else if len(w.due) == 1 {
		driver.ResetTimer(w.timer, keyWatchDelay)
	}
}

// remove stops watching hd's key: hd.gone does not fire after remove
// returns unless it already has. Release calls it before it deletes the
// key, so that its own delete is not a loss.
func (w *lossWatch) remove(hd *holding) {
	w.mu.Lock()
	id, st := hd.wid, w.stream
	if id > 0 {
		delete(w.watched, id)
	}
	hd.wid = ended
	w.mu.Unlock()
	if id > 0 {
		// In the background: a send on the stream can wait for its flow
		// control, and Release must not wait on it without a bound.
		go w.cancel(st, id)
	}
}

// startDue starts the watches of the keys that are due, and sets the
// timer for the next.
func (w *lossWatch) startDue() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	now := driver.Now()
	var reqs []*etcdserverpb.WatchRequest
	for len(w.due) > 0 {
		hd, at := w.due[0].hd, w.due[0].at
		if hd.wid != ended && at.After(now) {
			driver.ResetTimer(w.timer, at.Sub(now))
			break
		}
		w.due[0] = dueKey{}
		w.due = w.due[1:]
		if hd.wid != ended {
			reqs = append(reqs, w.watch(hd))
		}
	}
	if len(w.due) == 0 {
		w.due = nil // let the backing array go
	}
	if len(reqs) > 0 && !w.running {
		w.running = true
		go w.run()
	}
	st := w.stream
	w.mu.Unlock()
	w.send(st, reqs...)
}

// watch gives hd a watch ID and returns the request that creates its
// watch. w.mu is held.
func (w *lossWatch) watch(hd *holding) *etcdserverpb.WatchRequest {
	w.nextID++
	hd.wid = w.nextID
	w.watched[hd.wid] = hd
	return createRequest(hd)
}

func createRequest(hd *holding) *etcdserverpb.WatchRequest {
	return &etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CreateRequest{
		CreateRequest: &etcdserverpb.WatchCreateRequest{
			Key:           []byte(hd.key),
			StartRevision: hd.from,
			Filters:       []etcdserverpb.WatchCreateRequest_FilterType{etcdserverpb.WatchCreateRequest_NOPUT},
			WatchId:       hd.wid,
		}}}
}

// send sends reqs on st, if there is a stream; a failure ends the stream,
// and run creates every watch again on the next.
func (w *lossWatch) send(st etcdserverpb.Watch_WatchClient, reqs ...*etcdserverpb.WatchRequest) {
	if st == nil {
		return
	}
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	for _, r := range reqs {
		if st.Send(r) != nil {
			return
		}
	}
}

func (w *lossWatch) cancel(st etcdserverpb.Watch_WatchClient, id int64) {
	w.send(st, &etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CancelRequest{
		CancelRequest: &etcdserverpb.WatchCancelRequest{WatchId: id}}})
}

// run keeps a watch stream open until the driver closes, creating on each
// new stream the watches of every key watched.
func (w *lossWatch) run() {
	wc := etcdserverpb.NewWatchClient(w.d.cli.ActiveConnection())
	for failures := 0; w.ctx.Err() == nil; {
		// A member cut off from its quorum ends a stream that requires a
		// leader, rather than leave it silent.
		sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(w.ctx))
		if st, err := wc.Watch(sctx); err == nil {
			w.mu.Lock()
			w.stream = st
			reqs := make([]*etcdserverpb.WatchRequest, 0, len(w.watched))
			for _, hd := range w.watched {
				reqs = append(reqs, createRequest(hd))
			}
			w.mu.Unlock()
			// Sent while serve reads: etcd stops reading requests while
			// its responses are not read.
			go w.send(st, reqs...)
			w.serve(st, &failures)
			w.mu.Lock()
			w.stream = nil
			w.mu.Unlock()
		}
		cancel()
		failures++
		select {
		case <-w.ctx.Done():
		case <-time.After(retryBackoff.Delay(failures - 1)):
		}
	}
}

// serve dispatches the responses of st until it ends. It never waits to
// send: etcd stops reading requests while its responses are not read.
func (w *lossWatch) serve(st etcdserverpb.Watch_WatchClient, failures *int) {
	for {
		resp, err := st.Recv()
		if err != nil {
			return
		}
		if resp.Created && resp.Canceled {
			// etcd refused to create a watch (its response does not
			// say which): start over on a new stream, after a pause.
			return
		}
		*failures = 0
		switch {
		case resp.CompactRevision != 0 || resp.Canceled:
			// etcd ended the watch: its start revision was compacted
			// away, or it was cancelled.
			w.recheck(st, resp.WatchId)
		default:
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE {
					w.lost(st, resp.WatchId)
					break
				}
			}
		}
	}
}

// lost reports the key of watch id deleted.
func (w *lossWatch) lost(st etcdserverpb.Watch_WatchClient, id int64) {
	w.mu.Lock()
	hd := w.watched[id]
	if hd != nil {
		delete(w.watched, id)
		hd.wid = ended
	}
	w.mu.Unlock()
	// A watch removed before its creation reached etcd outlives its key's
	// holder: end it too.
	go w.cancel(st, id)
	if hd != nil {
		hd.gone.Fire()
	}
}

// recheck reads the key of watch id, which etcd ended, and reports it
// lost if it is gone, or watches it again from that read.
func (w *lossWatch) recheck(st etcdserverpb.Watch_WatchClient, id int64) {
	w.mu.Lock()
	hd := w.watched[id]
	if hd != nil {
		delete(w.watched, id)
		hd.wid = 0
	}
	w.mu.Unlock()
	if hd == nil {
		return // our own cancel, or one of a key no longer held
	}
	go func() {
		for failures := 0; ; failures++ {
			if failures > 0 {
				select {
				case <-w.ctx.Done():
					return
				case <-time.After(retryBackoff.Delay(failures - 1)):
				}
			}
			resp, err := w.d.cli.Get(clientv3.WithRequireLeader(w.ctx), hd.key, clientv3.WithKeysOnly())
			if w.ctx.Err() != nil {
				return
			}
			if err != nil {
				continue
			}
			w.mu.Lock()
			if hd.wid == ended {
				w.mu.Unlock()
				return
			}
			if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != hd.rev {
				hd.wid = ended
				w.mu.Unlock()
				hd.gone.Fire()
				return
			}
			hd.from = resp.Header.Revision + 1
			req := w.watch(hd)
			st := w.stream
			w.mu.Unlock()
			w.send(st, req)
			return
		}
	}()
}

// close ends the stream and every watch.
func (w *lossWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.stop != nil {
		w.stop()
	}
}
