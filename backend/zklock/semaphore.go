package zklock

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock/driver"
)

// errCompatSemaphore refuses a semaphore or a read-write lock in a compat
// layout: the foreign libraries' (kazoo's Semaphore and ReadLock, Curator's
// InterProcessSemaphoreV2 and InterProcessReadWriteLock) keep nodes of
// layouts of their own, so dlock's would not count against theirs.
func errCompatSemaphore(layout string) error {
	return fmt.Errorf("%w: zookeeper: semaphores and read-write locks are not available in compat layouts (compat=%s): kazoo's and Curator's use layouts of their own",
		driver.ErrUnsupported, layout)
}

// holderData caches the data of a queue's nodes (their owners'
// Request.Holder, which records how each asked: driver.HolderLimit,
// driver.HolderShared), which never changes: each node is read at most
// once per waiter.
type holderData struct {
	d      *Driver
	parent string
	known  map[string][]byte
}

// of returns the data of the node called name; zk.ErrNoNode if it is gone.
func (h *holderData) of(ctx context.Context, name string) ([]byte, error) {
	if data, ok := h.known[name]; ok {
		return data, nil
	}
	data, err := retry(ctx, h.d, func() ([]byte, error) {
		data, _, err := h.d.conn.Get(h.parent + "/" + name)
		return data, err
	})
	if err != nil {
		return nil, err
	}
	h.known[name] = data
	return data, nil
}

// awaitPermit waits until n, a semaphore's or a reader's node asked for by
// req, holds in its queue by driver.QueueHolders: until every node ahead
// holds and req admits it beside them. Any deletion ahead may be n's turn,
// not only that of the node just ahead, so the waiter watches the parent's
// children and checks again on every change (Curator's
// InterProcessSemaphoreV2 does the same): a release wakes every waiter of
// the semaphore or read-write lock, a herd that a mutex avoids. The data of
// the nodes ahead is read only when n could hold (a semaphore's node within
// its limit), and once each.
func (d *Driver) awaitPermit(ctx context.Context, n *lockNode, kids []string, req driver.Request, wait bool) (driver.Grant, error) {
	parent, name := n.parent(), n.name()
	data := &holderData{d: d, parent: parent, known: map[string][]byte{name: req.Holder}}
	limit := max(req.Limit, 1)
	var changed <-chan zk.Event // the watch on the parent's children, set with the listing in kids
	for {
		q := d.queue(kids)
		i := slices.IndexFunc(q, func(e queued) bool { return e.name == name })
		if i < 0 {
			n.retire()
			return driver.Grant{}, errVanished
		}
		if i < limit || req.Shared {
			held, err := driver.QueueHolders(i+1, func(j int) ([]byte, error) { return data.of(ctx, q[j].name) })
			switch {
			case held > i:
				return d.grant(ctx, n)
			case err != nil && !errors.Is(err, zk.ErrNoNode): // a node ahead gone: list again
				n.retire()
				return driver.Grant{}, d.fail(ctx, "read "+parent, err)
			}
		}
		if !wait {
			n.drop(ctx)
			return driver.Grant{}, driver.ErrNotAcquired
		}
		if changed != nil {
			select {
			case <-ctx.Done():
				n.retire()
				return driver.Grant{}, ctx.Err()
			case <-n.vanished.Done():
				return driver.Grant{}, errVanished
			case <-changed:
			}
		}
		var err error
		kids, changed, err = d.watchChildren(ctx, parent)
		if err != nil {
			n.retire()
			if errors.Is(err, zk.ErrNoNode) {
				return driver.Grant{}, errVanished
			}
			return driver.Grant{}, d.fail(ctx, "list "+parent, err)
		}
	}
}

// watchChildren lists path's children and sets a watch on them, in one
// request: no change after the listing goes unseen.
func (d *Driver) watchChildren(ctx context.Context, path string) ([]string, <-chan zk.Event, error) {
	type res struct {
		kids []string
		w    <-chan zk.Event
	}
	r, err := retry(ctx, d, func() (res, error) {
		kids, _, w, err := d.conn.ChildrenW(path)
		return res{kids, w}, err
	})
	return r.kids, r.w, err
}
