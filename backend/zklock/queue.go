package zklock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock/driver"
)

// Lock node names: Curator's protected prefix, a GUID, and a marker before
// the sequence number that the server appends.
const (
	protectedPrefix = "_c_"
	lockMarker      = "-lock-"
)

// errVanished: our queued node went away (its session expired, or someone
// deleted it) before it was granted; Acquire queues again.
var errVanished = errors.New("zklock: the queued node vanished")

// Acquire queues an ephemeral sequential node under the name's parent and
// waits, watching only the nodes just ahead, until it is the lowest; for a
// semaphore (Request.Limit > 1), until it holds one of the permits (see
// awaitPermit). A non-waiting Acquire lists the queue first and does not
// queue at all when it has as many nodes as the limit (for a mutex: any).
// A follower may answer that listing from before another client's
// release, so a queue found full is listed again after a sync before the
// answer is ErrNotAcquired.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	limit := max(req.Limit, 1)
	if (limit > 1 || req.Shared) && d.compat != "" {
		return driver.Grant{}, errCompatSemaphore(d.compat)
	}
	parent, err := d.parentOf(req.Name)
	if err != nil {
		return driver.Grant{}, err
	}
	if !req.Wait {
		kids, err := retry(ctx, d, func() ([]string, error) { return d.children(parent) })
		if err == nil && len(d.queue(kids)) >= limit && !req.Shared {
			kids, err = retry(ctx, d, func() ([]string, error) { return d.syncedChildren(parent) })
		}
		switch {
		case errors.Is(err, zk.ErrNoNode):
		case err != nil:
			return driver.Grant{}, d.fail(ctx, "list "+parent, err)
		case len(d.queue(kids)) >= limit && !req.Shared:
			return driver.Grant{}, driver.ErrNotAcquired
		}
	}
	for range 5 {
		n, kids, err := d.enqueue(ctx, parent, req.Holder)
		if errors.Is(err, errVanished) {
			continue
		}
		if err != nil {
			return driver.Grant{}, err
		}
		var g driver.Grant
		if limit > 1 || req.Shared {
			g, err = d.awaitPermit(ctx, n, kids, req, req.Wait)
		} else {
			g, err = d.await(ctx, n, kids, req.Wait)
		}
		if !errors.Is(err, errVanished) {
			return g, err
		}
		// The session ended while we queued: queue again in the new one.
		if err := requeuePause.Wait(ctx, 0); err != nil {
			return driver.Grant{}, err
		}
	}
	return driver.Grant{}, fmt.Errorf("%w: zookeeper: the session keeps ending while queued for %q", driver.ErrUnavailable, req.Name)
}

func (d *Driver) children(path string) ([]string, error) {
	kids, _, err := d.conn.Children(path)
	return kids, err
}

// syncedChildren lists path's children after a sync, so that the server
// answering has applied every write the leader committed before: a plain
// read from a follower may miss another client's create or delete that
// has already returned.
func (d *Driver) syncedChildren(path string) ([]string, error) {
	if _, err := d.conn.Sync(path); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, err
	}
	return d.children(path)
}

// queued is one lock node of a queue.
type queued struct {
	name string
	seq  int32  // dlock's layout: the sequence
	key  string // a compat layout: what the foreign recipe sorts by
}

// queueOf returns the lock nodes among a parent's children, in sequence
// order; other children are ignored.
//
// The server appends the parent's child version (cversion) as the
// sequence: an int32 that counts every create and delete of a child, and
// that wraps from 2147483647 to -2147483648 after 2³¹ of them (a parent
// that stays busy: an empty one is deleted, and its successor starts from
// zero). Sequences are therefore compared as serial numbers (RFC 1982), by
// the sign of their 32-bit difference, which orders correctly across the
// wrap as long as the live nodes of one queue span fewer than 2³¹ changes
// of the parent. This costs nothing, where ordering by czxid would need a
// read of every child's stat on each listing.
func queueOf(kids []string) []queued {
	q := make([]queued, 0, len(kids))
	for _, k := range kids {
		i := strings.LastIndex(k, lockMarker)
		if !strings.HasPrefix(k, protectedPrefix) || i < 0 {
			continue
		}
		seq, err := strconv.ParseInt(k[i+len(lockMarker):], 10, 32)
		if err != nil {
			continue
		}
		q = append(q, queued{name: k, seq: int32(seq)})
	}
	slices.SortFunc(q, func(a, b queued) int { return compareSeq(a.seq, b.seq) })
	return q
}

// compareSeq compares two sequence numbers in serial-number arithmetic:
// a comes before b when b is less than 2³¹ creations after it, wrapping
// included.
func compareSeq(a, b int32) int {
	return cmp.Compare(int32(uint32(a)-uint32(b)), 0)
}

// enqueue creates our node and lists the queue ahead of it. The create
// tells whether the node was its parent's only child: then it holds the
// lock, and the uncontended case is one round trip.
func (d *Driver) enqueue(ctx context.Context, parent string, data []byte) (*lockNode, []string, error) {
	c, err := d.create(ctx, parent, d.newGUID(), data)
	if err != nil {
		return nil, nil, err
	}
	n := &lockNode{d: d, path: c.path, session: c.session, czxid: c.czxid}
	if n.czxid == 0 {
		// Found after a lost reply: read its zxid and session.
		type res struct {
			ok bool
			st *zk.Stat
		}
		r, err := retry(ctx, d, func() (res, error) { ok, st, err := d.conn.Exists(n.path); return res{ok, st}, err })
		switch {
		case err != nil:
			go d.remove(n.path, n.session)
			return nil, nil, d.fail(ctx, "read "+n.path, err)
		case !r.ok:
			return nil, nil, errVanished
		}
		n.czxid, n.session = r.st.Czxid, r.st.EphemeralOwner
	}
	if c.only {
		return n, []string{n.name()}, nil
	}
	kids, err := retry(ctx, d, func() ([]string, error) { return d.children(parent) })
	if err != nil {
		n.retire()
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil, errVanished
		}
		return nil, nil, d.fail(ctx, "list "+parent, err)
	}
	return n, kids, nil
}

// watchNode sets a watch on path and returns its stat.
func (d *Driver) watchNode(ctx context.Context, path string) (*zk.Stat, <-chan zk.Event, error) {
	type res struct {
		st *zk.Stat
		w  <-chan zk.Event
	}
	r, err := retry(ctx, d, func() (res, error) {
		_, st, w, err := d.conn.GetW(path)
		return res{st, w}, err
	})
	return r.st, r.w, err
}

// await waits until n is the lowest node of its queue. It watches the node
// just ahead: when that one goes and it was the only one ahead (no lower
// node can appear), n holds the lock; otherwise await lists the queue
// again. Further back in the queue it also watches the node ahead of its
// predecessor, whose deletion means that the predecessor now holds the lock:
// await lists the queue at once, while the predecessor holds, so that its
// release is the turn of n without another round trip. A deletion thus
// wakes two waiters at most, never the whole queue.
func (d *Driver) await(ctx context.Context, n *lockNode, kids []string, wait bool) (driver.Grant, error) {
	var (
		pred  string
		predW <-chan zk.Event // watch on pred, kept while pred stays ahead
	)
	parent, name := n.parent(), n.name()
	for {
		q := d.queue(kids)
		i := slices.IndexFunc(q, func(e queued) bool { return e.name == name })
		switch {
		case i < 0:
			n.retire()
			return driver.Grant{}, errVanished
		case i == 0:
			return d.grant(ctx, n)
		case !wait:
			n.drop(ctx)
			return driver.Grant{}, driver.ErrNotAcquired
		}
		alone := i == 1
		// In dlock's layout no node can come before one created earlier,
		// so the deletion of the only node ahead is the grant. A compat
		// layout's order is the foreign recipe's, which may place a node
		// created later (a sequence past the wrap, a child of another
		// name) ahead: list again, as kazoo and Curator do.
		shortcut := alone && d.compat == ""
		var err error
		predGone, earlyGone := false, false
		if predW == nil || pred != q[i-1].name {
			pred = q[i-1].name
			if _, predW, err = d.watchNode(ctx, parent+"/"+pred); errors.Is(err, zk.ErrNoNode) {
				predGone, predW, err = true, nil, nil
			}
		}
		var earlyW <-chan zk.Event
		if err == nil && !predGone && !alone {
			if _, earlyW, err = d.watchNode(ctx, parent+"/"+q[i-2].name); errors.Is(err, zk.ErrNoNode) {
				earlyGone, err = true, nil
			}
		}
		switch {
		case err != nil:
			n.retire()
			return driver.Grant{}, d.fail(ctx, "watch "+parent, err)
		case predGone && shortcut:
			return d.grant(ctx, n)
		case predGone || earlyGone:
		default:
			select {
			case <-ctx.Done():
				n.retire()
				return driver.Grant{}, ctx.Err()
			case <-n.vanished.Done():
				return driver.Grant{}, errVanished
			case ev := <-predW:
				if ev.Type == zk.EventNodeDeleted && shortcut {
					return d.grant(ctx, n)
				}
				predW = nil
			case <-earlyW:
			}
		}
		kids, err = retry(ctx, d, func() ([]string, error) { return d.children(parent) })
		if err != nil {
			n.retire()
			if errors.Is(err, zk.ErrNoNode) {
				return driver.Grant{}, errVanished
			}
			return driver.Grant{}, d.fail(ctx, "list "+parent, err)
		}
	}
}
