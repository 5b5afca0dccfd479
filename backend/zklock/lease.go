package zklock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock/driver"
)

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
