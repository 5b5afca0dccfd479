package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock/dlock/driver"
)

// Acquire puts the caller's key in the lock's queue, attached to a lease
// of req.TTL rounded up to whole seconds, and returns when that key has the
// lowest create revision under the name's prefix: the algorithm of etcd's
// concurrency.Mutex. The token is the key's create revision.
//
// A waiter watches only the key directly ahead of it (no thundering herd),
// and keeps its lease alive while it waits.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	sec := ttlSeconds(req.TTL)
	for attempt := 0; ; attempt++ {
		g, err := d.acquire(ctx, req, sec)
		// A pooled lease can have been revoked by someone else (etcdctl
		// lease revoke), or have a key under the name already: take a
		// fresh one.
		if attempt == 0 && (errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, errKeyExists)) {
			continue
		}
		return g, err
	}
}

// errKeyExists reports that the key of a pooled lease under the lock's
// name existed before the acquire put it.
var errKeyExists = errors.New("etcdlock: the lease already has a key under this name")

func (d *Driver) acquire(ctx context.Context, req driver.Request, sec int64) (driver.Grant, error) {
	if counted(req) && d.compat != "" {
		return driver.Grant{}, errCompatCounted
	}
	l, err := d.getLease(ctx, sec)
	if err != nil {
		return driver.Grant{}, err
	}
	pfx := d.namePrefix(req.Name)
	key := d.lockKey(req.Name, l.id)
	put := clientv3.OpPut(key, string(req.Holder), clientv3.WithLease(l.id))
	txn := d.cli.Txn(ctx)
	if counted(req) {
		// A semaphore or a reader always queues, and reads the queue in
		// the same round trip to learn whether it holds (semaphore.go).
		txn = txn.If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(put, clientv3.OpGet(pfx, queueRead(req)...))
	} else if req.Wait {
		// Queue up and learn the key just ahead in one round trip: the
		// newest key before our put is the one our key follows, and
		// none means the lock is ours. The key is put only if it does
		// not exist, so that its create revision is this transaction's:
		// a pooled lease has no keys, but should one have been left
		// under the name, a put would keep its older create revision,
		// and this acquire would queue behind itself.
		txn = txn.If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpGet(pfx, clientv3.WithLastCreate()...), put)
	} else {
		// Put only into an empty queue, so that a failed TryLock leaves
		// nothing to clean up.
		txn = txn.If(clientv3.Compare(clientv3.CreateRevision(pfx), "=", 0).WithPrefix()).Then(put)
	}
	resp, err := txn.Commit()
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return driver.Grant{}, err // nothing was put
	}
	if err != nil {
		// The put may have been applied before the error, or may still be
		// (a cancelled request can reach the server after a delete sent to
		// take it back): revoke the lease, which removes the key whenever
		// it was put and makes a later put fail. Returned to the pool, the
		// lease would keep a late key alive — a queue entry of nobody's,
		// ahead of every waiter, for as long as the lease is reused.
		d.discard(l)
		return driver.Grant{}, unavailable(ctx, "acquire", err)
	}
	if !resp.Succeeded && (req.Wait || counted(req)) {
		// The lease has a key here already (see above): revoke the lease,
		// which deletes that key, and let Acquire try a fresh one.
		d.discard(l)
		return driver.Grant{}, errKeyExists
	}
	if !resp.Succeeded {
		d.pool.put(sec, l)
		return driver.Grant{}, driver.ErrNotAcquired
	}
	// The key did not exist (the Wait transaction compares its create
	// revision with 0; TryLock's, the whole queue's), so the revision of
	// the transaction is its create revision.
	rev := resp.Header.Revision
	hd := &holding{key: key, rev: rev, sec: sec, lease: l, gone: driver.NewSignal()}
	if req.Wait && !counted(req) {
		// A mutex waiter's key is watched from its grant on, not while it
		// waits: the read after each deletion ahead checks that the key
		// is still there, and a watch while waiting would cost every
		// grant after a long wait a watch of its own.
		if last := resp.Responses[0].GetResponseRange().Kvs; len(last) > 0 {
			if err := d.wait(ctx, pfx, hd, last[0]); err != nil {
				d.abandon(key, l, sec)
				return driver.Grant{}, err
			}
		}
		d.loss.add(hd)
	} else {
		d.loss.add(hd)
		if counted(req) && !holdsAt(resp.Responses[1].GetResponseRange().Kvs, rev) {
			err := driver.ErrNotAcquired
			if req.Wait {
				err = d.waitPermit(ctx, pfx, hd)
			}
			if err != nil {
				d.loss.remove(hd)
				d.abandon(key, l, sec)
				return driver.Grant{}, err
			}
		}
	}
	return driver.Grant{
		Token:  uint64(rev),
		TTL:    l.ttl,
		Since:  l.lastConfirmed(),
		Lost:   hd.gone,
		Handle: hd,
	}, nil
}

// wait returns when hd's key is the oldest in the queue pfx, or with an
// error when ctx ends or the key or its lease is lost. It is the loop of
// etcd's waitDeletes: wait for the deletion of the key just ahead of ours
// (the newest create revision below ours; first, the one the acquire's
// transaction found), look again, and so on until no key is ahead. Each
// waiter watches only the key just ahead of it, so a release wakes one
// waiter, not the whole queue; a waiter that gives up wakes the one behind
// it, which then finds the next key ahead.
//
// While it waits, keepQueued renews the lease that keeps our key alive.
func (d *Driver) wait(ctx context.Context, pfx string, hd *holding, ahead *mvccpb.KeyValue) error {
	kctx, stopKeep := context.WithCancel(ctx)
	defer stopKeep()
	leaseErr := d.keepQueued(kctx, hd.lease)

	atLeast := hd.rev // any state since our key exists answers "who is ahead?"
	readRev := hd.rev // the acquire's transaction saw ahead at our key's revision
	for failures := 0; ; {
		var err error
		if ahead == nil {
			ahead, readRev, err = d.ahead(ctx, pfx, hd, atLeast)
			if err == nil && ahead == nil {
				return nil // nothing ahead: the lock is ours
			}
		}
		var w *syncedWatch
		if err == nil {
			w, err = d.watchDeletion(ctx, string(ahead.Key), ahead.CreateRevision, readRev)
		}
		ahead = nil // look again after the deletion, or after a failure
		if errors.Is(err, errEntryLost) {
			return err
		}
		if err != nil {
			// The server is unreachable or has no leader: try again
			// until ctx ends or our lease runs out.
			failures++
			if err := pauseQueued(ctx, leaseErr, failures); err != nil {
				return err
			}
			continue
		}
		failures = 0
		deletedAt, err := d.awaitDeletion(ctx, w, leaseErr)
		if err != nil {
			return err
		}
		atLeast = max(atLeast, deletedAt)
	}
}

// errEntryLost reports that a waiter's own key went away while it waited:
// its lease lapsed while the server was down or unreachable, or Break
// removed it.
var errEntryLost = fmt.Errorf("%w: our queue entry was deleted while waiting (lease expired or key removed)", driver.ErrUnavailable)

// ahead returns the key just ahead of hd's in queue pfx (nil if none) and
// the revision read, in a state at revision atLeast or later.
//
// The same read checks that hd's own key still exists: nothing ahead of us
// proves nothing if our key went too. Without this check a waiter would be
// granted a lock it had already lost — the "lease check missing after
// waiting" that Jepsen found in etcd's own lock.
//
// The keys at or below ours only ever disappear (a new key always gets a
// higher revision), so the answer from any state at or after atLeast is
// true or, if stale, errs only on the safe side: it shows a key that is
// gone, whose watch then finds it gone. Such a read is served by the local
// member without a raft round trip, which under write load would wait for
// the next disk sync.
func (d *Driver) ahead(ctx context.Context, pfx string, hd *holding, atLeast int64) (*mvccpb.KeyValue, int64, error) {
	resp, err := d.readAtLeast(ctx, atLeast, pfx, clientv3.WithPrefix(),
		clientv3.WithMaxCreateRev(hd.rev),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
		clientv3.WithLimit(2), clientv3.WithKeysOnly())
	if err != nil {
		return nil, 0, err
	}
	kvs := resp.Kvs
	if len(kvs) == 0 || kvs[0].CreateRevision != hd.rev || string(kvs[0].Key) != hd.key {
		return nil, 0, errEntryLost
	}
	if len(kvs) == 1 {
		return nil, resp.Header.Revision, nil
	}
	return kvs[1], resp.Header.Revision, nil
}

// awaitDeletion waits for the deletion of w's key and returns its
// revision, or 0 if the watch broke (no leader, compaction) and the queue
// must be read again. It ends w.
func (d *Driver) awaitDeletion(ctx context.Context, w *syncedWatch, leaseErr <-chan error) (int64, error) {
	defer w.cancel()
	if w.gone {
		return w.goneAt, nil // deleted between our read and the watch
	}
	for {
		select {
		case wr, ok := <-w.ch:
			if at, broken := deletion(wr, ok); at > 0 || broken {
				return at, nil
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		case err := <-leaseErr:
			return 0, err
		}
	}
}

// readAtLeast reads from the local member's state (a serializable read)
// when that state is at revision atLeast or later, and with a linearizable
// read otherwise. Its callers ask monotone questions — "is anything left
// below my key?", "is that key gone?" — that any state from atLeast on
// answers.
func (d *Driver) readAtLeast(ctx context.Context, atLeast int64, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if atLeast > 0 {
		resp, err := d.cli.Get(ctx, key, append(opts, clientv3.WithSerializable())...)
		if err == nil && resp.Header.Revision >= atLeast {
			return resp, nil
		}
	}
	resp, err := d.cli.Get(clientv3.WithRequireLeader(ctx), key, opts...)
	if err != nil {
		return nil, unavailable(ctx, "get", err)
	}
	return resp, nil
}

// pauseQueued waits out the pause before a queued waiter's next try, after
// its failures-th failure in a row: it returns ctx's error if ctx ends
// first, or the error of leaseErr if the lease of the waiter's key is lost.
func pauseQueued(ctx context.Context, leaseErr <-chan error, failures int) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-leaseErr:
		return err
	case <-time.After(retryBackoff.Delay(failures - 1)):
		return nil
	}
}

// retryBackoff paces the retries after failures: after the n-th failure
// in a row, Delay(n-1).
var retryBackoff = driver.Backoff{Base: 100 * time.Millisecond, Cap: time.Second, Jitter: 0.5}

// keepQueued keeps a queued waiter's lease alive, renewing it every TTL/3,
// each attempt bounded by TTL/3.
// The returned channel receives an error if the lease is lost or cannot be
// renewed before it runs out.
func (d *Driver) keepQueued(ctx context.Context, l *lease) <-chan error {
	errc := make(chan error, 1)
	go func() {
		failures := 0
		for {
			next := driver.Until(l.lastConfirmed().Add(l.ttl / 3))
			if failures > 0 {
				next = retryBackoff.Delay(failures - 1)
			}
			select {
			case <-ctx.Done():
				return
			case <-driver.NewTimer(next).C:
			}
			// Each attempt gets a third of the TTL: a keepalive that goes
			// to a member while it cannot reach the leader (a leader cut
			// off, before the others elect a new one) can hang longer than
			// the lease has left, and the lease would lapse although a new
			// leader is there to renew it (see
			// TestLeaderCutFromFollowersLosesLeaseBeforeNextGrant).
			actx, cancel := context.WithTimeout(ctx, l.ttl/3)
			err := d.keepAlive(actx, l)
			cancel()
			switch {
			case err == nil:
				failures = 0
			case ctx.Err() != nil:
				return
			case errors.Is(err, driver.ErrLeaseLost) || driver.Since(l.lastConfirmed()) >= l.ttl:
				errc <- fmt.Errorf("%w: the lease of our queue entry ran out while waiting: %w", driver.ErrUnavailable, err)
				return
			default:
				failures++
			}
		}
	}()
	return errc
}

// discard revokes a lease whose keys are unknown, in the background,
// waiting cleanupWait at most; if the revoke fails the lease expires by itself
// (nothing renews it).
func (d *Driver) discard(l *lease) {
	d.cleanup(func(ctx context.Context) { _, _ = d.cli.Revoke(ctx, l.id) })
}

// abandon takes back the queue entry of an acquire that failed or was
// cancelled: it deletes the key (then the lease returns to the pool) or,
// failing that, revokes the lease, which deletes the key with it. It waits
// for the server a short while, then leaves the rest to a goroutine; if
// even that fails, the lease expires after its TTL.
func (d *Driver) abandon(key string, l *lease, sec int64) {
	d.cleanup(func(ctx context.Context) {
		if _, err := d.cli.Delete(ctx, key); err == nil {
			d.pool.put(sec, l)
			return
		}
		_, _ = d.cli.Revoke(ctx, l.id)
	})
}

// cleanupWait is how long a failed or cancelled acquire waits for its
// cleanup before returning: long enough for a healthy server to take the
// entry back, so that the caller's next look finds it gone, short enough
// not to hold up a caller whose server is unreachable.
const cleanupWait = time.Second

// cleanup runs f in the background with a timeout of its own, and waits
// cleanupWait at most for it.
func (d *Driver) cleanup(f func(ctx context.Context)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		f(ctx)
	}()
	select {
	case <-done:
	case <-time.After(cleanupWait):
	}
}
