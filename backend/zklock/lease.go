package zklock

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	return driver.Grant{Token: uint64(n.czxid), TTL: ttl, Since: since, Lost: &n.vanished, Handle: n}, nil
}

// check confirms that n still exists and belongs to its session, as the
// leader sees it: a sync first, then a read. The server the client talks to
// answers the sync only once the leader has answered it, after every write
// the leader committed before — a session expiry and the deletion of its
// nodes included — so the read that follows proves that the session was
// alive at the leader after the send time. A plain read would not: a
// follower cut off from the leader answers reads from its own stale state
// (for up to syncLimit ticks, until it gives the leader up), while the
// leader expires the session and grants the lock to someone else. The sync
// is the session's next (Driver.sync), which the checks of other nodes
// share.
//
// The first check of a held node sets a watch on it with its read (not
// the grant: that would cost every grant a request, and an uncontended
// lock is one round trip; until then a renewal's read is what would see
// a Break). From
// then on, if the connection's events reach the driver, a check needs no
// read of its own: the server sends the watch's event (the node's deletion,
// or the end of its session) before it answers a sync sent after it, and
// the driver handles the event on receipt, before the sync's answer is
// returned; so a node that was not reported gone when the sync returns
// was there when the sync was sent. That holds on one TCP connection to
// one server: after a reconnection, go-zookeeper sets its watches again
// with a request that may follow the sync, so the watch and the sync must
// have gone over the same connection, and a node's first check on a new
// connection reads it and sets its watch again.
func (d *Driver) check(ctx context.Context, n *lockNode) error {
	if n.isVanished() {
		return d.gone(n) // known lost: no request can renew it
	}
	armed := n.armedIn()
	r, err := d.sync(ctx)
	if settled, err := d.checkSynced(ctx, n, armed, r, err); settled {
		return err
	}
	return d.read(ctx, n)
}

// checkSynced is check after its sync, r (or its error), as far as it
// needs no request: it reports whether that settled the check, and how.
// armed is the connection on which n's watch was set, read before the
// sync was asked for: a watch set by a read sent after the sync proves
// nothing about the time before that read.
func (d *Driver) checkSynced(ctx context.Context, n *lockNode, armed int64, r *syncRound, err error) (bool, error) {
	if err != nil && d.conn.SessionID() == n.session {
		return true, d.fail(ctx, "sync", err)
	}
	if err != nil || r.session != n.session {
		n.vanishWith(driver.ErrSessionLost)
		return true, fmt.Errorf("%w: lock node %s went with it", driver.ErrSessionLost, n.path)
	}
	if d.events && armed != 0 && armed == r.conn {
		if n.isVanished() {
			return true, d.gone(n)
		}
		return true, nil
	}
	return false, nil
}

// read is the rest of a check whose sync did not settle it: a read of n,
// which sets its watch if none is set on this connection.
func (d *Driver) read(ctx context.Context, n *lockNode) error {
	type res struct {
		ok bool
		st *zk.Stat
	}
	watch := n.claimWatch()
	rr, err := roundTrip(ctx, d, func() (res, error) {
		if !watch {
			ok, st, err := d.conn.Exists(n.path)
			return res{ok, st}, err
		}
		// The read sets the watch that reports a deletion (a Break) at
		// once from now on; a watch only on a node that exists, since it
		// is never created again.
		conn := d.connection.Load()
		_, st, w, err := d.conn.GetW(n.path)
		if err != nil {
			n.unwatch()
		} else {
			n.watching(w, conn)
		}
		if errors.Is(err, zk.ErrNoNode) {
			return res{}, nil
		}
		return res{err == nil, st}, err
	})
	if err != nil {
		return d.fail(ctx, "check "+n.path, err)
	}
	if !rr.ok || rr.st.EphemeralOwner != n.session || rr.st.Czxid != n.czxid {
		return d.gone(n)
	}
	return nil
}

// gone ends n, which is gone or no longer ours, and says why.
func (d *Driver) gone(n *lockNode) error {
	cause := d.sessionCause(n.session)
	if cause == nil {
		cause = n.vanished.Cause() // an event reported it, with its reason
	}
	n.vanishWith(cause)
	if cause != nil {
		return fmt.Errorf("%w: lock node %s went with it", cause, n.path)
	}
	return fmt.Errorf("%w: lock node %s is gone", driver.ErrLeaseLost, n.path)
}

// Extend checks, after a sync, that the holder's node still exists in its
// session; the answer proves the session alive at the leader after the send
// time. The lease length is the session's (see the package documentation),
// whatever ttl says.
func (d *Driver) Extend(ctx context.Context, h driver.Held, _ time.Duration) error {
	n, err := d.nodeOf(h)
	if err != nil {
		return err
	}
	sent := driver.Now()
	return n.renewed(h.Name, sent, d.check(ctx, n))
}

// nodeOf is the node of a grant of d.
func (d *Driver) nodeOf(h driver.Held) (*lockNode, error) {
	n, ok := h.Handle.(*lockNode)
	if !ok || n.d != d {
		return nil, fmt.Errorf("%w: %q: not a grant of this driver", driver.ErrLeaseLost, h.Name)
	}
	return n, nil
}

// renewed settles a renewal of n sent at sent whose check answered err.
func (n *lockNode) renewed(name string, sent time.Time, err error) error {
	if err != nil {
		return err
	}
	if !n.confirm(sent) {
		return fmt.Errorf("%w: %q: the lease ran out before this renewal", driver.ErrLeaseLost, name)
	}
	return nil
}

// batchReads bounds the reads an ExtendBatch has in flight at once.
const batchReads = 32

// ExtendBatch renews b's leases as Extend would, with one sync for all of
// them: a check shares its sync with every other (Driver.sync), so a
// batch's leases whose watch is set on the connection the sync went over
// are renewed by its answer alone, and the others are read, up to
// batchReads at once. A client holding many locks thus renews them at the
// cost of a sync per batch rather than a wait for a sync per lease.
func (d *Driver) ExtendBatch(ctx context.Context, b []driver.Extension) []error {
	errs := make([]error, len(b))
	nodes := make([]*lockNode, len(b))
	armed := make([]int64, len(b))
	live := false
	for i, e := range b {
		n, err := d.nodeOf(e.Held)
		switch {
		case err != nil:
			errs[i] = err
		case n.isVanished():
			errs[i] = d.gone(n)
		default:
			nodes[i], armed[i], live = n, n.armedIn(), true
		}
	}
	if !live {
		return errs
	}
	sent := driver.Now()
	r, serr := d.sync(ctx)
	reads := make(chan struct{}, batchReads)
	var wg sync.WaitGroup
	for i, n := range nodes {
		if n == nil {
			continue
		}
		if settled, err := d.checkSynced(ctx, n, armed[i], r, serr); settled {
			errs[i] = n.renewed(b[i].Held.Name, sent, err)
			continue
		}
		reads <- struct{}{}
		wg.Go(func() {
			errs[i] = n.renewed(b[i].Held.Name, sent, d.read(ctx, n))
			<-reads
		})
	}
	wg.Wait()
	return errs
}

// Release deletes the holder's node, which wakes the next waiter. If the
// connection is down until ctx ends, the node is deleted in the background
// as soon as it is back (or goes with the session).
func (d *Driver) Release(ctx context.Context, h driver.Held) error {
	n, err := d.nodeOf(h)
	if err != nil {
		return err
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
// gone. It costs no goroutine and no timer: from its grant on, its driver
// tracks it (Driver.held), the driver's one timer (Driver.deadlines) minds
// its lease deadline, and the events of its watch and of the session reach
// it through the driver (Driver.event).
type lockNode struct {
	d              *Driver
	path           string // parent + "/" + name
	session, czxid int64
	vanished       driver.Signal // fired when the node is gone or no longer ours (Grant.Lost)

	mu        sync.Mutex
	confirmed time.Time // send time of the last round trip that proved the lease
	ttl       time.Duration
	deadline  driver.Alarm // from the grant: deletes the node if the lease runs out
	state     nodeState
	armed     int64 // the connection (Driver.connection) on which its watch was set; 0: none
}

// nodeState is a lockNode's progress, a set of flags.
type nodeState uint8

const (
	nodeDone      nodeState = 1 << iota // vanished, expired or released: no renewal may succeed
	nodeReleasing                       // deleted by its holder: its deletion is no loss
	nodeHeld                            // granted: tracked by the driver until over
	nodeWatched                         // a watch on the node is being set, or set and has not fired
	nodeOver                            // gone, deleted or being deleted: nothing left to mind
)

// parent is the node's queue; name, its name in it.
func (n *lockNode) parent() string { return n.path[:strings.LastIndexByte(n.path, '/')] }
func (n *lockNode) name() string   { return n.path[strings.LastIndexByte(n.path, '/')+1:] }

// hold makes n a holder whose lease was proved at since: the driver tracks
// it, and deletes it if the lease runs out.
func (n *lockNode) hold(since time.Time, ttl time.Duration) {
	n.mu.Lock()
	n.confirmed, n.ttl = since, ttl
	if n.state&(nodeHeld|nodeOver) == 0 {
		n.state |= nodeHeld
		n.d.deadlines.Set(n, since.Add(ttl))
		n.d.track(n)
	}
	n.mu.Unlock()
	if n.d.conn.SessionID() != n.session {
		n.vanishWith(driver.ErrSessionLost) // a session that ended before it was tracked
	}
}

// confirm moves the lease deadline to sent+ttl; it fails once the node has
// vanished or the deadline has passed.
func (n *lockNode) confirm(sent time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state&nodeDone != 0 || driver.Now().After(n.confirmed.Add(n.ttl)) {
		return false
	}
	if sent.After(n.confirmed) {
		n.confirmed = sent
	}
	return true
}

// Alarm is n's entry in Driver.deadlines.
func (n *lockNode) Alarm() *driver.Alarm { return &n.deadline }

// Due runs when the lease deadline may have passed, on the driver's timer.
// If it has, without a confirmed renewal, the holder has been told that it
// lost the lock and will not release it: the lease ends, and the node is
// deleted, in the background.
func (n *lockNode) Due() {
	n.mu.Lock()
	if n.state&nodeOver != 0 || n.d.isClosed() {
		n.mu.Unlock()
		return
	}
	if deadline := n.confirmed.Add(n.ttl); driver.Until(deadline) > 0 {
		n.d.deadlines.Set(n, deadline) // renewed meanwhile
		n.mu.Unlock()
		return
	}
	n.mu.Unlock()
	go func() {
		n.vanish()
		n.d.remove(n.path, n.session)
	}()
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

// vanishWith ends the node as gone, with the reason if known
// (driver.ErrSessionLost), for Grant.Lost's Cause.
func (n *lockNode) vanishWith(cause error) {
	n.mu.Lock()
	n.state |= nodeDone
	n.mu.Unlock()
	n.end()
	n.vanished.FireCause(cause)
}

// end marks the node as needing no more minding: the driver forgets it and
// its deadline. It reports whether it was minded until then.
func (n *lockNode) end() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state&nodeOver != 0 {
		return false
	}
	n.state |= nodeOver
	if n.state&nodeHeld != 0 {
		n.d.deadlines.Stop(n)
		n.d.untrack(n)
	}
	return true
}

// release marks the node as being deleted by its holder, whose own watch
// then does not report the deletion as a loss.
func (n *lockNode) release() {
	n.mu.Lock()
	n.state |= nodeDone | nodeReleasing
	n.mu.Unlock()
}

// drop deletes a node that was not granted (a try-lock that found the lock
// held) before returning, so that it never blocks anyone; if that fails,
// it is deleted in the background.
func (n *lockNode) drop(ctx context.Context) {
	n.release()
	if _, err := roundTrip(ctx, n.d, func() (struct{}, error) { return struct{}{}, n.d.conn.Delete(n.path, -1) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
		n.retire()
		return
	}
	n.finish()
}

// finish records that the node is gone and nothing is left to mind.
func (n *lockNode) finish() { n.end() }

func (n *lockNode) isVanished() bool { return n.vanished.Fired() }

// retire deletes the node in the background, for as long as its session
// lives, unless it is already gone.
func (n *lockNode) retire() {
	if n.end() {
		go n.d.remove(n.path, n.session)
	}
}

// claimWatch reports whether a renewal should set a watch on the node (it
// is held and tracked, and none was set on the current connection), and if
// so records the watch as being set: unwatch undoes that if the read that
// sets it fails.
func (n *lockNode) claimWatch() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state&(nodeHeld|nodeOver) != nodeHeld {
		return false
	}
	if n.state&nodeWatched != 0 && (n.armed == 0 || n.armed == n.d.connection.Load()) {
		return false // being set, or set on this connection
	}
	n.state |= nodeWatched
	n.armed = 0
	return true
}

func (n *lockNode) unwatch() {
	n.mu.Lock()
	n.state &^= nodeWatched
	n.armed = 0
	n.mu.Unlock()
}

// armedIn is the connection on which the watch on n was set, if it has not
// fired; 0 if none.
func (n *lockNode) armedIn() int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.armed
}

// watching records that a watch on n, w, was set by a read sent on
// connection conn, and passes its event on to the driver if its
// connection's events do not reach it.
func (n *lockNode) watching(w <-chan zk.Event, conn int64) {
	n.mu.Lock()
	if n.state&nodeWatched != 0 && n.d.connection.Load() == conn { // not fired, nor reconnected, meanwhile
		n.armed = conn
	}
	n.mu.Unlock()
	if n.d.events {
		return
	}
	// A connection that the caller made: this watch's event is passed on
	// by a goroutine of its own.
	go func() {
		select {
		case ev := <-w:
			n.d.event(ev)
		case <-n.d.closed:
		}
	}()
}

// watchFired handles an event of the watch on n: a deletion (a Break) or
// the end of the session is the end of the lease, unless its holder
// deleted it; a write to the node leaves it in place, and the next
// renewal watches it again.
func (n *lockNode) watchFired(ev zk.Event) {
	n.mu.Lock()
	n.state &^= nodeWatched
	n.armed = 0
	releasing := n.state&nodeReleasing != 0
	n.mu.Unlock()
	switch {
	case releasing || ev.Type == zk.EventNodeDataChanged:
	case ev.Type == zk.EventNotWatching && errors.Is(ev.Err, zk.ErrSessionExpired):
		n.vanishWith(driver.ErrSessionLost) // the node went with its session
	case ev.Type == zk.EventNotWatching && n.d.isClosed():
	default:
		n.vanishWith(n.d.sessionCause(n.session))
	}
}

// track adds a granted node to those whose watch and session events the
// driver dispatches; untrack removes it. Both are called with n.mu held:
// the driver's lock comes after a node's.
func (d *Driver) track(n *lockNode) {
	d.heldMu.Lock()
	d.held[n.path] = n
	d.heldMu.Unlock()
}

func (d *Driver) untrack(n *lockNode) {
	d.heldMu.Lock()
	delete(d.held, n.path)
	d.heldMu.Unlock()
}

// event dispatches an event of the connection: an event of a watch on a
// held node to that node; a change of session state to every held node,
// which the end of their session ends (go-zookeeper reports it as
// StateExpired, and goes on in a new session). It runs on go-zookeeper's
// receiving goroutine, and must not call the connection.
func (d *Driver) event(ev zk.Event) {
	if ev.Type == zk.EventSession {
		if ev.State == zk.StateDisconnected || ev.State == zk.StateExpired {
			d.connection.Add(1) // the next one is another connection
		}
		d.sessionChanged()
		return
	}
	if ev.Path == "" {
		return
	}
	d.heldMu.Lock()
	n := d.held[ev.Path]
	d.heldMu.Unlock()
	if n != nil {
		n.watchFired(ev)
	}
}

// sessionChanged ends the leases of the held nodes whose session is no
// longer the connection's.
func (d *Driver) sessionChanged() {
	var lost []*lockNode
	d.heldMu.Lock()
	if len(d.held) > 0 {
		// d.conn was set before the first node was tracked.
		current := d.conn.SessionID()
		for _, n := range d.held {
			if n.session != current {
				lost = append(lost, n)
			}
		}
	}
	d.heldMu.Unlock()
	for _, n := range lost {
		n.vanishWith(driver.ErrSessionLost)
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
