package zklock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock/driver"
)

// Inspect lists the lock's queue, after a sync so that a follower answers
// with every create and delete already returned to any client: the lowest
// node is the holder (its czxid the token), the others are the waiters in
// order. Each node's data is its owner's Request.Holder. For a semaphore
// or a read-write lock, the nodes at the head of the queue that hold
// (driver.QueueHolders) are all listed in Permits. ExpiresIn is 0: the lock lasts as
// long as the holder's session.
func (d *Driver) Inspect(ctx context.Context, name string) (driver.Info, error) {
	info := driver.Info{Name: name}
	parent, err := d.parentOf(name)
	if err != nil {
		return info, err
	}
	kids, err := retry(ctx, d, func() ([]string, error) { return d.syncedChildren(parent) })
	if errors.Is(err, zk.ErrNoNode) {
		return info, nil
	}
	if err != nil {
		return info, d.fail(ctx, "list "+parent, err)
	}
	type node struct {
		data []byte
		stat *zk.Stat
	}
	type entry struct {
		holder []byte
		token  uint64
	}
	var queue []entry
	for _, q := range d.queue(kids) {
		n, err := retry(ctx, d, func() (node, error) {
			data, st, err := d.conn.Get(parent + "/" + q.name)
			return node{data, st}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue // gone since the listing
		}
		if err != nil {
			return info, d.fail(ctx, "read "+parent, err)
		}
		e := entry{holder: n.data, token: uint64(n.stat.Czxid)}
		if !d.isDlocks(q.name) {
			e.holder, e.token = foreignHolder(d.compat, n.data), 0
		}
		queue = append(queue, e)
	}
	if len(queue) == 0 {
		return info, nil
	}
	held := 1 // in a compat layout, only the head
	if d.compat == "" {
		held, _ = driver.QueueHolders(len(queue), func(i int) ([]byte, error) { return queue[i].holder, nil })
	}
	info.Held, info.Token, info.Holder = true, queue[0].token, queue[0].holder
	if slices.ContainsFunc(queue[:held], func(e entry) bool { return driver.HolderLimit(e.holder) > 1 || driver.HolderShared(e.holder) }) {
		for _, e := range queue[:held] {
			info.Permits = append(info.Permits, driver.Permit{Token: e.token, Holder: e.holder})
		}
	}
	for _, e := range queue[held:] {
		info.Waiters = append(info.Waiters, e.holder)
	}
	return info, nil
}

// List inspects every lock under the root whose name starts with prefix
// and that is held or waited on.
func (d *Driver) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	if d.compat != "" {
		return d.listPaths(ctx, prefix)
	}
	kids, err := retry(ctx, d, func() ([]string, error) { return d.syncedChildren(d.root) })
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, d.fail(ctx, "list "+d.root, err)
	}
	var names []string
	for _, k := range kids {
		if name, ok := unescapeName(k); ok && strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	return driver.ListByInspect(ctx, names, d.Inspect)
}

// Break deletes the holder's node, whoever owns it: the holder's watch
// reports the loss at once, and the next waiter is granted, with a higher
// token. Of a semaphore it deletes the nodes of every permit holder
// (driver.QueueHolders; this reads the data of each node behind the head up to
// the first waiter, one read for a mutex with waiters). It needs the delete
// permission on the lock's parent.
//
// When the holders' nodes are gone by the time the deletes arrive
// (released, or their sessions ended, after the listing), Break lists the
// queue again and breaks the nodes that hold now, if any: it returns nil
// only after its own delete removed a holder's node, and ErrNotHeld when
// it finds the lock free. (One case stays ambiguous: a delete whose reply
// was lost with the connection, answered NoNode when sent again; that is
// counted as broken.)
func (d *Driver) Break(ctx context.Context, name string) error {
	parent, err := d.parentOf(name)
	if err != nil {
		return err
	}
	for range 5 {
		kids, err := retry(ctx, d, func() ([]string, error) { return d.syncedChildren(parent) })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return d.fail(ctx, "list "+parent, err)
		}
		q := d.queue(kids)
		if len(q) == 0 {
			return fmt.Errorf("%w: %q is free", driver.ErrNotHeld, name)
		}
		held, err := d.holders(ctx, parent, q)
		if err != nil {
			return d.fail(ctx, "read "+parent, err)
		}
		if testHookBeforeBreakDelete != nil {
			testHookBeforeBreakDelete()
		}
		brokeAny := false
		for _, h := range q[:held] {
			node := parent + "/" + h.name
			broke, err := d.deleteOnce(ctx, node)
			if err != nil {
				return d.fail(ctx, "delete "+node, err)
			}
			brokeAny = brokeAny || broke
		}
		if brokeAny {
			return nil
		}
		// Gone before our deletes: someone else's turn may have begun.
	}
	return fmt.Errorf("%w: zookeeper: the holder of %q kept changing under Break", driver.ErrUnavailable, name)
}

// holders returns how many nodes at the head of q hold
// (driver.QueueHolders), reading the data of the nodes. In a compat layout only
// the head holds. A node gone since the listing ends the count: the nodes
// ahead of it held.
func (d *Driver) holders(ctx context.Context, parent string, q []queued) (int, error) {
	if d.compat != "" {
		return 1, nil
	}
	data := &holderData{d: d, parent: parent, known: map[string][]byte{}}
	held, err := driver.QueueHolders(len(q), func(i int) ([]byte, error) { return data.of(ctx, q[i].name) })
	if errors.Is(err, zk.ErrNoNode) {
		return held, nil
	}
	return held, err
}

// testHookBeforeBreakDelete, when set by a test, runs between Break's
// listing and its delete.
var testHookBeforeBreakDelete func()

// deleteOnce deletes path, trying again while the connection is down (for
// up to a session timeout). It reports whether a delete of its own removed
// the node: false when the first answer was NoNode; true when a retry was
// answered NoNode, since the earlier attempt may have been applied before
// its reply was lost.
func (d *Driver) deleteOnce(ctx context.Context, path string) (bool, error) {
	attempts := 0
	_, err := retry(ctx, d, func() (struct{}, error) { attempts++; return struct{}{}, d.conn.Delete(path, -1) })
	if errors.Is(err, zk.ErrNoNode) {
		return attempts > 1, nil
	}
	return err == nil, err
}

// listMax bounds the nodes listPaths visits (a variable for tests).
var listMax = 10000

// listPaths is List in a compat layout, where lock names are paths of the
// application's tree: it walks the nodes whose path starts with prefix
// (from the parent of the prefix's last segment: "/locks/ord" looks at
// /locks/ord* and below), skipping /zookeeper, and inspects those with
// contender nodes (see isContender). The prefix must start with "/"; "/"
// walks the whole tree. A walk that would visit more than listMax nodes
// fails, asking for a longer prefix.
func (d *Driver) listPaths(ctx context.Context, prefix string) ([]driver.Info, error) {
	if !strings.HasPrefix(prefix, "/") {
		return nil, fmt.Errorf("%w: with compat, List takes a path prefix such as /locks/, not %q", driver.ErrInvalidName, prefix)
	}
	dir := prefix[:strings.LastIndex(prefix, "/")]
	var names []string
	visited := 0
	var walk func(path string) error
	walk = func(path string) error {
		if visited++; visited > listMax {
			return fmt.Errorf("%w: more than %d nodes under %q; give a longer prefix", driver.ErrInvalidName, listMax, prefix)
		}
		kids, err := retry(ctx, d, func() ([]string, error) { return d.syncedChildren(path) })
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return d.fail(ctx, "list "+path, err)
		}
		if path != dir && slices.ContainsFunc(kids, d.isContender) {
			names = append(names, path)
		}
		for _, k := range kids {
			if d.isContender(k) {
				continue // an ephemeral node: no children
			}
			child := strings.TrimSuffix(path, "/") + "/" + k
			if child == "/zookeeper" || !strings.HasPrefix(child, prefix) && !strings.HasPrefix(prefix, child+"/") {
				continue
			}
			if err := walk(child); err != nil {
				return err
			}
		}
		return nil
	}
	if dir == "" {
		dir = "/"
	}
	if err := walk(dir); err != nil {
		return nil, err
	}
	return driver.ListByInspect(ctx, names, d.Inspect)
}
