package zklock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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
// waits, watching only the nodes just ahead, until it is the lowest. A
// non-waiting Acquire lists the queue first and does not queue at all when
// it is not empty. A follower may answer that listing from before another
// client's release, so a queue found not empty is listed again after a
// sync before the answer is ErrNotAcquired.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	parent := d.lockPath(req.Name)
	if !req.Wait {
		kids, err := retry(ctx, d, func() ([]string, error) { return d.children(parent) })
		if err == nil && len(queueOf(kids)) > 0 {
			kids, err = retry(ctx, d, func() ([]string, error) { return d.syncedChildren(parent) })
		}
		switch {
		case errors.Is(err, zk.ErrNoNode):
		case err != nil:
			return driver.Grant{}, d.fail(ctx, "list "+parent, err)
		case len(queueOf(kids)) > 0:
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
		g, err := d.await(ctx, n, kids, req.Wait)
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
	seq  int32
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
		q = append(q, queued{k, int32(seq)})
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
	c, err := d.create(ctx, parent, driver.NewNonce(), data)
	if err != nil {
		return nil, nil, err
	}
	n := &lockNode{
		d: d, path: c.path, name: c.path[len(parent)+1:], parent: parent, session: c.session, czxid: c.czxid,
		vanished: driver.NewSignal(), retired: make(chan struct{}), held: make(chan struct{}), watchNow: make(chan struct{}), finished: make(chan struct{}),
	}
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
	go n.keep()
	if c.only {
		return n, []string{n.name}, nil
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
	for {
		q := queueOf(kids)
		i := slices.IndexFunc(q, func(e queued) bool { return e.name == n.name })
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
		var err error
		predGone, earlyGone := false, false
		if predW == nil || pred != q[i-1].name {
			pred = q[i-1].name
			if _, predW, err = d.watchNode(ctx, n.parent+"/"+pred); errors.Is(err, zk.ErrNoNode) {
				predGone, predW, err = true, nil, nil
			}
		}
		var earlyW <-chan zk.Event
		if err == nil && !predGone && !alone {
			if _, earlyW, err = d.watchNode(ctx, n.parent+"/"+q[i-2].name); errors.Is(err, zk.ErrNoNode) {
				earlyGone, err = true, nil
			}
		}
		switch {
		case err != nil:
			n.retire()
			return driver.Grant{}, d.fail(ctx, "watch "+n.parent, err)
		case predGone && alone:
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
				if ev.Type == zk.EventNodeDeleted && alone {
					return d.grant(ctx, n)
				}
				predW = nil
			case <-earlyW:
			}
		}
		kids, err = retry(ctx, d, func() ([]string, error) { return d.children(n.parent) })
		if err != nil {
			n.retire()
			if errors.Is(err, zk.ErrNoNode) {
				return driver.Grant{}, errVanished
			}
			return driver.Grant{}, d.fail(ctx, "list "+n.parent, err)
		}
	}
}

// grant makes n, the lowest node, a lease. The lease runs from the send
// time of the last request of the session that reached the leader (its
// create, for an uncontended lock); if that is not recent (a wait in the
// queue), a check of the node renews it.
func (d *Driver) grant(ctx context.Context, n *lockNode) (driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		n.retire()
		return driver.Grant{}, err
	}
	ttl := d.leaseTTL()
	since := d.confirmedSince(n.session)
	if since.IsZero() || driver.Since(since) > ttl/4 {
		sent := driver.Now()
		if err := d.check(ctx, n); err != nil {
			n.retire()
			if errors.Is(err, driver.ErrLeaseLost) {
				return driver.Grant{}, errVanished // queue again
			}
			return driver.Grant{}, err
		}
		since = sent
	}
	n.hold(since, ttl)
	return driver.Grant{Token: uint64(n.czxid), TTL: ttl, Since: since, Lost: n.vanished, Handle: n}, nil
}

// check confirms that n still exists and belongs to its session, as the
// leader sees it: a sync first, then a read. The server the client talks to
// answers the sync only once the leader has answered it, after every write
// the leader committed before — a session expiry and the deletion of its
// nodes included — so the read that follows proves that the session was
// alive at the leader after the send time. A plain read would not: a
// follower cut off from the leader answers reads from its own stale state
// (for up to syncLimit ticks, until it gives the leader up), while the
// leader expires the session and grants the lock to someone else.
func (d *Driver) check(ctx context.Context, n *lockNode) error {
	type res struct {
		ok bool
		st *zk.Stat
	}
	r, err := roundTrip(ctx, d, func() (res, error) {
		if _, err := d.conn.Sync(n.path); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return res{}, err
		}
		ok, st, err := d.conn.Exists(n.path)
		return res{ok, st}, err
	})
	if err != nil {
		return d.fail(ctx, "check "+n.path, err)
	}
	if !r.ok || r.st.EphemeralOwner != n.session || r.st.Czxid != n.czxid {
		if cause := d.sessionCause(n.session); cause != nil {
			n.vanishWith(cause)
			return fmt.Errorf("%w: lock node %s went with it", cause, n.path)
		}
		n.vanish()
		return fmt.Errorf("%w: lock node %s is gone", driver.ErrLeaseLost, n.path)
	}
	return nil
}

// Extend checks, after a sync, that the holder's node still exists in its
// session; the answer proves the session alive at the leader after the send
// time. The lease length is the session's (see the package documentation),
// whatever ttl says.
func (d *Driver) Extend(ctx context.Context, h driver.Held, _ time.Duration) error {
	n, ok := h.Handle.(*lockNode)
	if !ok || n.d != d {
		return fmt.Errorf("%w: %q: not a grant of this driver", driver.ErrLeaseLost, h.Name)
	}
	sent := driver.Now()
	if err := d.check(ctx, n); err != nil {
		return err
	}
	if !n.confirm(sent) {
		return fmt.Errorf("%w: %q: the lease ran out before this renewal", driver.ErrLeaseLost, h.Name)
	}
	n.watch()
	return nil
}

// Release deletes the holder's node, which wakes the next waiter. If the
// connection is down until ctx ends, the node is deleted in the background
// as soon as it is back (or goes with the session).
func (d *Driver) Release(ctx context.Context, h driver.Held) error {
	n, ok := h.Handle.(*lockNode)
	if !ok || n.d != d {
		return fmt.Errorf("%w: %q: not a grant of this driver", driver.ErrLeaseLost, h.Name)
	}
	if n.isVanished() {
		return fmt.Errorf("%w: %q: the lock node is gone", driver.ErrLeaseLost, h.Name)
	}
	n.release()
	retried := false
	for try := 0; ; try++ {
		_, err := roundTrip(ctx, d, func() (struct{}, error) { return struct{}{}, d.conn.Delete(n.path, -1) })
		switch {
		case err == nil:
			n.finish()
			return nil
		case errors.Is(err, zk.ErrSessionExpired) || d.conn.SessionID() != n.session:
			// The session ended, and the node with it, before our delete
			// took effect: the lease was lost, not released.
			n.vanishWith(driver.ErrSessionLost)
			return fmt.Errorf("%w: %q: the session of the lock node ended", driver.ErrSessionLost, h.Name)
		case errors.Is(err, zk.ErrNoNode) && retried:
			// NoNode, in the node's own session, after an attempt whose
			// reply was lost: that attempt deleted it.
			n.finish()
			return nil
		case errors.Is(err, zk.ErrNoNode):
			n.vanish()
			return fmt.Errorf("%w: %q: the lock node is gone", driver.ErrLeaseLost, h.Name)
		case !transient(err) || d.isClosed():
			n.retire()
			return d.fail(ctx, "delete "+n.path, err)
		}
		retried = true
		if err := requestRetry.Wait(ctx, try); err != nil {
			n.retire()
			return d.fail(ctx, "delete "+n.path, err)
		}
	}
}

// lockNode is one of our nodes in a queue, from its creation until it is
// gone. Its keeper goroutine watches it and deletes it when it must go.
type lockNode struct {
	d                    *Driver
	parent, name, path   string
	session, czxid       int64
	vanishOnce, retireOn sync.Once
	holdOnce, watchOnce  sync.Once
	finishOnce           sync.Once

	vanished *driver.Signal // fired when the node is gone or no longer ours (Grant.Lost)
	retired  chan struct{}  // closed when the node must be deleted
	held     chan struct{}  // closed when granted: the keeper minds the lease deadline
	watchNow chan struct{}  // closed when the keeper should watch the node
	finished chan struct{}  // closed when its owner deleted the node

	mu        sync.Mutex
	confirmed time.Time // send time of the last round trip that proved the lease
	ttl       time.Duration
	done      bool // vanished, expired or released: no renewal may succeed
	releasing bool // deleted by its holder
}

func (n *lockNode) hold(since time.Time, ttl time.Duration) {
	n.mu.Lock()
	n.confirmed, n.ttl = since, ttl
	n.mu.Unlock()
	n.holdOnce.Do(func() { close(n.held) })
}

// confirm moves the lease deadline to sent+ttl; it fails once the node has
// vanished or the deadline has passed.
func (n *lockNode) confirm(sent time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done || driver.Now().After(n.confirmed.Add(n.ttl)) {
		return false
	}
	if sent.After(n.confirmed) {
		n.confirmed = sent
	}
	return true
}

// left is the time until the lease deadline.
func (n *lockNode) left() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return driver.Until(n.confirmed.Add(n.ttl))
}

// expire ends the lease if its deadline has passed, so that no renewal
// succeeds after it; it reports whether it did.
func (n *lockNode) expire() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if driver.Now().Before(n.confirmed.Add(n.ttl)) {
		return false
	}
	n.done = true
	return true
}

func (n *lockNode) vanish() { n.vanishWith(nil) }

// sessionCause is driver.ErrSessionLost if the connection's session is no
// longer session (the server expired it, and its nodes with it), else nil:
// a node of a live session that is gone was deleted (a Break).
func (d *Driver) sessionCause(session int64) error {
	if d.conn.SessionID() != session {
		return driver.ErrSessionLost
	}
	return nil
}

// vanishWith is vanish with the reason the node is gone, if known
// (driver.ErrSessionLost), for Grant.Lost's Cause.
func (n *lockNode) vanishWith(cause error) {
	n.mu.Lock()
	n.done = true
	n.mu.Unlock()
	n.vanishOnce.Do(func() { n.vanished.FireCause(cause) })
}

// release marks the node as being deleted by its holder, whose own watch
// then does not report the deletion as a loss.
func (n *lockNode) release() {
	n.mu.Lock()
	n.done, n.releasing = true, true
	n.mu.Unlock()
}

func (n *lockNode) isReleasing() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.releasing
}

// drop deletes a node that was not granted (a try-lock that found the lock
// held) before returning, so that it never blocks anyone; if that fails,
// the keeper keeps trying.
func (n *lockNode) drop(ctx context.Context) {
	n.release()
	if _, err := roundTrip(ctx, n.d, func() (struct{}, error) { return struct{}{}, n.d.conn.Delete(n.path, -1) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
		n.retire()
		return
	}
	n.finish()
}

// finish tells the keeper that the node is gone and nothing is left to mind.
func (n *lockNode) finish() { n.finishOnce.Do(func() { close(n.finished) }) }

func (n *lockNode) isVanished() bool {
	select {
	case <-n.vanished.Done():
		return true
	default:
		return false
	}
}

// watch asks the keeper to watch the node, if it does not yet.
func (n *lockNode) watch() { n.watchOnce.Do(func() { close(n.watchNow) }) }

// retire asks the keeper to delete the node.
func (n *lockNode) retire() { n.retireOn.Do(func() { close(n.retired) }) }

// keep minds the node until it is gone. From the lease's first renewal on,
// it watches the node: a deletion (Break) or the end of the session then
// fires vanished at once. (Until then the renewal, a third of the lease
// after the grant, is what notices; not watching earlier saves every grant
// a request — an uncontended lock is one round trip — and a waiter learns
// that its node went with its session from the watch on its predecessor.)
// A retirement, or a lease whose deadline passed without a confirmed
// renewal (its holder has been told it lost the lock, and will not release
// it), deletes the node.
func (n *lockNode) keep() {
	var watch <-chan zk.Event
	arm := func() bool {
		_, w, err := n.d.watchNode(context.Background(), n.path)
		if err != nil {
			if !n.isReleasing() {
				n.vanishWith(n.d.sessionCause(n.session))
				if !errors.Is(err, zk.ErrNoNode) {
					n.d.remove(n.path, n.session)
				}
			}
			return false
		}
		watch = w
		return true
	}
	watchNow := n.watchNow
	var expire <-chan time.Time
	held := n.held
	for {
		select {
		case <-watchNow:
			watchNow = nil
			if !arm() {
				return
			}
		case ev := <-watch:
			if n.isReleasing() {
				return
			}
			if ev.Type == zk.EventNodeDataChanged {
				// Someone wrote to our node: it is still there; watch again.
				if !arm() {
					return
				}
				continue
			}
			if ev.Type == zk.EventNotWatching && errors.Is(ev.Err, zk.ErrSessionExpired) {
				n.vanishWith(driver.ErrSessionLost) // the node went with its session
				return
			}
			n.vanishWith(n.d.sessionCause(n.session))
			return
		case <-held:
			held = nil
			t := driver.NewTimer(n.left())
			defer t.Stop()
			expire = t.C
		case <-expire:
			if !n.expire() {
				expire = driver.NewTimer(n.left()).C
				continue
			}
			n.vanish()
			n.d.remove(n.path, n.session)
			return
		case <-n.retired:
			n.d.remove(n.path, n.session)
			return
		case <-n.finished:
			return
		case <-n.d.closed:
			return
		}
	}
}

// remove deletes a node of ours for as long as its session lives (an
// ephemeral node goes with its session) and the driver is open.
func (d *Driver) remove(path string, session int64) {
	for try := 0; ; try++ {
		err := d.conn.Delete(path, -1)
		if err == nil || !transient(err) || d.conn.SessionID() != session {
			return
		}
		select {
		case <-d.closed:
			return
		case <-time.After(cleanupRetry.Delay(try)):
		}
	}
}

// created is the outcome of create.
type created struct {
	path           string
	session, czxid int64 // czxid 0: not known (the node was found after a lost reply)
	only           bool  // it was its parent's only child: the holder
}

// create adds a node for us to parent's queue. The node's name carries a
// fresh GUID (Curator's protected mode): after a create whose reply was lost
// with the connection, create looks for its GUID before trying again, so
// that it never leaves a node behind. A missing parent (never created, or
// deleted by the server as an empty container) is created and the create
// retried.
func (d *Driver) create(ctx context.Context, parent, guid string, data []byte) (created, error) {
	prefix := parent + "/" + protectedPrefix + guid + lockMarker
	session := d.conn.SessionID()
	unknown := false // a create may have succeeded without our learning it
	fail := func(err error) (created, error) {
		if unknown {
			go d.removeGUID(parent, guid, session)
		}
		return created{}, err
	}
	give := time.Now().Add(d.session())
	for try := 0; ; try++ {
		if time.Now().After(give) || d.isClosed() {
			return fail(fmt.Errorf("%w: zookeeper: create %s: no connection within the session timeout", driver.ErrUnavailable, prefix))
		}
		if unknown {
			p, err := d.findGUID(ctx, parent, guid)
			switch {
			case err == nil && p != "":
				return created{path: p, session: session}, nil
			case err == nil:
				unknown = false // it was not applied: create again
			case ctx.Err() != nil || !transient(err):
				return fail(d.fail(ctx, "find "+prefix, err))
			}
		}
		if !unknown {
			session = d.conn.SessionID()
			c, err := d.createOnce(ctx, prefix, data, parent, guid, session)
			switch {
			case err == nil:
				return c, nil
			case errors.Is(err, zk.ErrNoNode):
				if err := d.makeParent(ctx, parent); err != nil && !transient(err) {
					return fail(d.fail(ctx, "create "+parent, err))
				}
				continue
			case ctx.Err() != nil:
				return fail(ctx.Err()) // createOnce cleans up after a create in flight
			case !transient(err):
				return fail(d.fail(ctx, "create "+prefix, err))
			}
			unknown = true
		}
		if err := requestRetry.Wait(ctx, try); err != nil {
			return fail(err)
		}
	}
}

// createOnce sends one create, in a transaction with an empty write to the
// parent: go-zookeeper returns neither the zxid nor the stat of a create,
// but the parent's stat after that write carries the transaction's zxid —
// the new node's czxid, the token — and the number of children, which is 1
// when the new node is the only one: the lock is ours without a listing. If
// ctx ends first, the outcome is awaited in the background and any node the
// create made is deleted.
func (d *Driver) createOnce(ctx context.Context, prefix string, data []byte, parent, guid string, session int64) (created, error) {
	type result struct {
		c   created
		err error
	}
	ch := make(chan result, 1)
	sent := driver.Now()
	go func() {
		res, err := d.conn.Multi(
			&zk.CreateRequest{Path: prefix, Data: data, Acl: d.acl, Flags: zk.FlagEphemeralSequential},
			&zk.SetDataRequest{Path: parent, Version: -1})
		if err == nil && len(res) != 2 {
			err = fmt.Errorf("a transaction of 2 operations got %d results", len(res))
		}
		for _, r := range res {
			if r.Error != nil {
				err = r.Error // the first operation's failure, not its effect on the second
				break
			}
		}
		if err != nil {
			ch <- result{err: err}
			return
		}
		st := res[1].Stat
		ch <- result{c: created{path: res[0].String, session: session, czxid: st.Mzxid, only: st.NumChildren == 1}}
	}()
	select {
	case r := <-ch:
		if r.err == nil || answered(r.err) {
			d.confirm(sent)
		}
		if r.err == nil && d.conn.SessionID() != session {
			r.c.session = d.conn.SessionID()
		}
		return r.c, r.err
	case <-ctx.Done():
		go func() {
			switch r := <-ch; {
			case r.err == nil:
				d.remove(r.c.path, session)
			case transient(r.err):
				d.removeGUID(parent, guid, session)
			}
		}()
		return created{}, ctx.Err()
	}
}

// findGUID looks for the node with guid among parent's children, after a
// sync so that the server answering has applied every write the leader
// committed — including a create of ours that the leader accepted before
// the connection dropped. It returns "" if there is none.
func (d *Driver) findGUID(ctx context.Context, parent, guid string) (string, error) {
	kids, err := roundTrip(ctx, d, func() ([]string, error) { return d.syncedChildren(parent) })
	if errors.Is(err, zk.ErrNoNode) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	want := protectedPrefix + guid + lockMarker
	for _, k := range kids {
		if strings.HasPrefix(k, want) {
			return parent + "/" + k, nil
		}
	}
	return "", nil
}

// removeGUID deletes the node with guid, if a create of ours made it after
// all, for as long as its session lives.
func (d *Driver) removeGUID(parent, guid string, session int64) {
	for try := 0; ; try++ {
		p, err := d.findGUID(context.Background(), parent, guid)
		if err == nil {
			if p != "" {
				d.remove(p, session)
			}
			return
		}
		if !transient(err) || d.conn.SessionID() != session {
			return
		}
		select {
		case <-d.closed:
			return
		case <-time.After(cleanupRetry.Delay(try)):
		}
	}
}

// makeParent creates a lock's parent as a container node, and the root
// first if it is missing.
func (d *Driver) makeParent(ctx context.Context, parent string) error {
	_, err := roundTrip(ctx, d, func() (string, error) { return d.conn.CreateContainer(parent, nil, zk.FlagContainer, d.acl) })
	if errors.Is(err, zk.ErrNoNode) {
		if err = d.makeRoot(ctx); err == nil {
			_, err = roundTrip(ctx, d, func() (string, error) { return d.conn.CreateContainer(parent, nil, zk.FlagContainer, d.acl) })
		}
	}
	if errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return err
}

// makeRoot creates the root and its ancestors as persistent nodes.
func (d *Driver) makeRoot(ctx context.Context) error {
	for i := 1; i <= len(d.root); i++ {
		if i < len(d.root) && d.root[i] != '/' {
			continue
		}
		_, err := roundTrip(ctx, d, func() (string, error) { return d.conn.Create(d.root[:i], nil, 0, d.acl) })
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}
