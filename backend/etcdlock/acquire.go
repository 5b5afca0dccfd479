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

// Acquire puts the caller's key in the lock's queue, attached to a lease
// of req.TTL rounded up to whole seconds, and returns when that key has the
// lowest create revision under the name's prefix: the algorithm of etcd's
// concurrency.Mutex. The token is the key's create revision.
//
// A waiter watches only the key directly ahead of it (no thundering herd),
// and keeps its lease alive while it waits.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	sec := ttlSeconds(req.TTL)
	l, err := d.getLease(ctx, sec)
	if err != nil {
		return driver.Grant{}, err
	}
	key := d.lockKey(req.Name, req.Owner)
	pfx := d.namePrefix(req.Name)
	put := clientv3.OpPut(key, string(req.Holder), clientv3.WithLease(l.id))
	txn := d.cli.Txn(ctx)
	if req.Wait {
		// Queue up and learn the holder in one round trip.
		txn = txn.Then(put, clientv3.OpGet(pfx, clientv3.WithFirstCreate()...))
	} else {
		// Put only into an empty queue, so that a failed TryLock leaves
		// nothing to clean up.
		txn = txn.If(clientv3.Compare(clientv3.CreateRevision(pfx), "=", 0).WithPrefix()).Then(put)
	}
	resp, err := txn.Commit()
	if err != nil {
		// The put may have been applied before the error: take it back.
		d.abandon(key, l, sec)
		return driver.Grant{}, unavailable(ctx, "acquire", err)
	}
	if !resp.Succeeded {
		d.pool.put(sec, l)
		return driver.Grant{}, driver.ErrNotAcquired
	}
	// The key is new (its name holds a fresh owner key), so the revision of
	// the transaction is its create revision.
	rev := resp.Header.Revision
	hd := &holding{key: key, rev: rev, sec: sec, lease: l, lost: d.watchKey(key, rev, rev)}
	if req.Wait {
		first := resp.Responses[1].GetResponseRange().Kvs
		if len(first) > 0 && first[0].CreateRevision != rev {
			if err := d.wait(ctx, pfx, hd); err != nil {
				hd.lost.stop()
				d.abandon(key, l, sec)
				return driver.Grant{}, err
			}
		}
	}
	return driver.Grant{
		Token:  uint64(rev),
		TTL:    l.ttl,
		Since:  l.lastConfirmed(),
		Lost:   hd.lost.gone,
		Handle: hd,
	}, nil
}

// wait returns when hd's key is the lowest in the queue pfx, or with an
// error when ctx ends or the key or its lease is lost.
//
// Each round finds the key directly ahead (the highest create revision
// below ours) and watches it for deletion. Keys below ours can only
// disappear — a new key always gets a higher revision — so if the key ahead
// was the only one below ours, its deletion makes us the holder without
// another read.
func (d *Driver) wait(ctx context.Context, pfx string, hd *holding) error {
	kctx, stopKeep := context.WithCancel(ctx)
	defer stopKeep()
	leaseErr := d.keepQueued(kctx, hd.lease)

	for failures := 0; ; {
		ahead, only, hdrRev, err := d.ahead(ctx, pfx, hd.rev)
		if err == nil && ahead == nil {
			return nil
		}
		var w *syncedWatch
		if err == nil {
			w, err = d.watchDeletion(ctx, string(ahead.Key), ahead.CreateRevision, hdrRev)
		}
		if err != nil {
			// The server is unreachable or has no leader: try again
			// until ctx ends or our lease runs out.
			failures++
			select {
			case <-ctx.Done():
				return ctx.Err()
			case err := <-leaseErr:
				return err
			case <-time.After(retryDelay(failures)):
			}
			continue
		}
		failures = 0
		if w.gone {
			continue // it went away before the watch began: look again
		}
		deleted, err := w.waitDelete(ctx, hd.lost.gone, leaseErr)
		w.cancel()
		if err != nil {
			return err
		}
		if deleted && only {
			return nil
		}
	}
}

// ahead returns the key directly ahead of revision rev in queue pfx (nil
// if none), whether it is the only key ahead, and the read's revision.
func (d *Driver) ahead(ctx context.Context, pfx string, rev int64) (kv *mvccpb.KeyValue, only bool, hdrRev int64, err error) {
	resp, err := d.cli.Get(clientv3.WithRequireLeader(ctx), pfx, clientv3.WithPrefix(),
		clientv3.WithMaxCreateRev(rev-1),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
		clientv3.WithLimit(2), clientv3.WithKeysOnly())
	if err != nil {
		return nil, false, 0, unavailable(ctx, "get", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, false, resp.Header.Revision, nil
	}
	return resp.Kvs[0], len(resp.Kvs) == 1, resp.Header.Revision, nil
}

// retryDelay is the pause before the n-th retry after a failure.
func retryDelay(n int) time.Duration {
	return driver.Jitter(min(50*time.Millisecond<<min(n, 5), time.Second))
}

// keepQueued keeps a queued waiter's lease alive, renewing it every TTL/3.
// The returned channel receives an error if the lease is lost or cannot be
// renewed before it runs out.
func (d *Driver) keepQueued(ctx context.Context, l *lease) <-chan error {
	errc := make(chan error, 1)
	go func() {
		failures := 0
		for {
			next := time.Until(l.lastConfirmed().Add(l.ttl / 3))
			if failures > 0 {
				next = retryDelay(failures)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(next):
			}
			err := d.keepAlive(ctx, l)
			switch {
			case err == nil:
				failures = 0
			case ctx.Err() != nil:
				return
			case errors.Is(err, driver.ErrLeaseLost) || time.Since(l.lastConfirmed()) >= l.ttl:
				errc <- fmt.Errorf("%w: the lease of our queue entry ran out while waiting: %w", driver.ErrUnavailable, err)
				return
			default:
				failures++
			}
		}
	}()
	return errc
}

// abandon takes back the queue entry of an acquire that failed or was
// cancelled: it deletes the key (then the lease returns to the pool) or,
// failing that, revokes the lease, which deletes the key with it. It waits
// for the server a short while, then leaves the rest to a goroutine; if
// even that fails, the lease expires after its TTL.
func (d *Driver) abandon(key string, l *lease, sec int64) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if _, err := d.cli.Delete(ctx, key); err == nil {
			d.pool.put(sec, l)
			return
		}
		_, _ = d.cli.Revoke(ctx, l.id)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
}
