package zklock

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock/driver"
)

// errCompatSemaphore refuses a semaphore in a compat layout: the foreign
// libraries' semaphores (kazoo's Semaphore, Curator's
// InterProcessSemaphoreV2) keep nodes of their own layouts, not a queue of
// lock nodes, so dlock's permits would not count against theirs.
func errCompatSemaphore(layout string, limit int) error {
	return fmt.Errorf("%w: zookeeper: semaphores (%d permits asked for) are not available in compat layouts (compat=%s): kazoo's Semaphore and Curator's InterProcessSemaphoreV2 use other layouts",
		driver.ErrUnsupported, limit, layout)
}

// holderCount returns how many entries at the head of a queue of size
// entries hold a permit: entry i holds when fewer than its own limit
// entries are ahead of it (i < limit(i)) and every entry ahead holds. The
// second rule matters only when clients disagree on the limit: an entry
// behind a waiter never holds, so that grants follow the queue (tokens, the
// czxids, increase in grant order) and nobody is granted while its own
// limit or more hold. The head always holds, so limit(0) is not asked;
// holderCount stops at the first error of limit.
func holderCount(size int, limit func(i int) (int, error)) (int, error) {
	for i := 1; i < size; i++ {
		l, err := limit(i)
		if err != nil {
			return i, err
		}
		if i >= l {
			return i, nil
		}
	}
	return size, nil
}

// limits caches the limits of a queue's nodes, read from their data (the
// holder metadata, see driver.HolderLimit), which never changes: each node
// is read at most once per waiter.
type limits struct {
	d      *Driver
	parent string
	known  map[string]int
}

// of returns the limit of the node called name; zk.ErrNoNode if it is gone.
func (l *limits) of(ctx context.Context, name string) (int, error) {
	if n, ok := l.known[name]; ok {
		return n, nil
	}
	data, err := retry(ctx, l.d, func() ([]byte, error) {
		data, _, err := l.d.conn.Get(l.parent + "/" + name)
		return data, err
	})
	if err != nil {
		return 0, err
	}
	n := driver.HolderLimit(data)
	l.known[name] = n
	return n, nil
}

// awaitPermit waits until n holds one of the limit permits of its queue:
// until fewer than limit nodes are ahead of it and every node ahead holds
// (holderCount). Any deletion ahead may be n's turn, not only that of the
// node just ahead, so the waiter watches the parent's children and checks
// again on every change (Curator's InterProcessSemaphoreV2 does the same):
// a release wakes every waiter of the semaphore, a herd that a mutex
// avoids. The limits of the nodes ahead are read only when n is within its
// limit, and once each.
func (d *Driver) awaitPermit(ctx context.Context, n *lockNode, kids []string, limit int, wait bool) (driver.Grant, error) {
	lim := &limits{d: d, parent: n.parent, known: map[string]int{n.name: limit}}
	var changed <-chan zk.Event // the watch on the parent's children, set with the listing in kids
	for {
		q := d.queue(kids)
		i := slices.IndexFunc(q, func(e queued) bool { return e.name == n.name })
		if i < 0 {
			n.retire()
			return driver.Grant{}, errVanished
		}
		if i < limit {
			held, err := holderCount(i+1, func(j int) (int, error) { return lim.of(ctx, q[j].name) })
			switch {
			case held > i:
				return d.grant(ctx, n)
			case err != nil && !errors.Is(err, zk.ErrNoNode): // a node ahead gone: list again
				n.retire()
				return driver.Grant{}, d.fail(ctx, "read "+n.parent, err)
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
		kids, changed, err = d.watchChildren(ctx, n.parent)
		if err != nil {
			n.retire()
			if errors.Is(err, zk.ErrNoNode) {
				return driver.Grant{}, errVanished
			}
			return driver.Grant{}, d.fail(ctx, "list "+n.parent, err)
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
