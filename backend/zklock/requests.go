package zklock

import (
	"context"
	"errors"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock/driver"
)

// call runs a ZooKeeper request, which go-zookeeper cannot cancel, and
// returns when it completes or ctx ends. A request left behind completes
// in the background: go-zookeeper answers or fails every request, at the
// latest when the connection is given up.
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if ctx.Done() == nil {
		return f()
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// roundTrip is call for requests whose answer proves the session alive at
// the leader: writes, and syncs (with the read that follows them). A
// plain read does not, since a follower cut off from the leader still
// answers it.
func roundTrip[T any](ctx context.Context, d *Driver, f func() (T, error)) (T, error) {
	sent := driver.Now()
	v, err := call(ctx, f)
	if err == nil || answered(err) {
		d.confirm(sent)
	}
	return v, err
}

// syncRound is one sync of the session that the checks waiting for it share.
type syncRound struct {
	done    chan struct{} // closed when answered or failed
	session int64         // the session it was answered in
	conn    int64         // the connection (Driver.connection) it went over; 0 if it changed meanwhile
	err     error
}

// sync returns once a sync sent after the call was answered; it confirms
// the session alive (see roundTrip). The checks of all the driver's nodes
// share syncs: those that arrive while one is in flight wait for the next,
// which goes out when the one in flight returns. A renewal thus costs no
// request of its own, and the driver no more than one sync in flight,
// whatever the number of leases.
func (d *Driver) sync(ctx context.Context) (*syncRound, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d.syncMu.Lock()
	r := d.nextSync
	if r == nil {
		r = &syncRound{done: make(chan struct{})}
		d.nextSync = r
		if !d.syncing {
			d.syncing = true
			go d.syncLoop()
		}
	}
	d.syncMu.Unlock()
	select {
	case <-r.done:
		return r, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// syncLoop sends the syncs that checks wait for, one at a time, until none
// waits.
func (d *Driver) syncLoop() {
	for {
		d.syncMu.Lock()
		r := d.nextSync
		d.nextSync = nil
		if r == nil {
			d.syncing = false
			d.syncMu.Unlock()
			return
		}
		d.syncMu.Unlock()
		session, conn, sent := d.conn.SessionID(), d.connection.Load(), driver.Now()
		_, err := d.conn.Sync("/")
		if err == nil || answered(err) {
			d.confirm(sent)
		}
		if d.connection.Load() != conn {
			conn = 0
		}
		if err == nil && d.conn.SessionID() != session {
			session = d.conn.SessionID() // answered in a new session
		}
		r.session, r.conn, r.err = session, conn, err
		close(r.done)
	}
}

// retry is call for idempotent requests: it tries again while the
// connection is down, for up to a session timeout (by then the session is
// gone too), or until ctx ends. Its answers confirm no lease (see
// roundTrip).
func retry[T any](ctx context.Context, d *Driver, f func() (T, error)) (T, error) {
	give := time.Now().Add(d.session())
	for try := 0; ; try++ {
		v, err := call(ctx, f)
		if err == nil || !transient(err) || time.Now().After(give) || d.isClosed() {
			return v, err
		}
		if err := requestRetry.Wait(ctx, try); err != nil {
			return v, err
		}
	}
}

// transient reports a failure of the connection, after which the request
// may or may not have been applied and may be retried.
func transient(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved)
}

// answered reports an error that is the server's reply.
func answered(err error) bool {
	for _, e := range []error{zk.ErrNoNode, zk.ErrNodeExists, zk.ErrNotEmpty, zk.ErrBadVersion,
		zk.ErrNoAuth, zk.ErrNoChildrenForEphemerals, zk.ErrInvalidACL} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// fail turns a request's error into the driver's (driver.Classify).
func (d *Driver) fail(ctx context.Context, op string, err error) error {
	if d.isClosed() {
		op += ": the driver is closed"
	}
	return driver.Classify(ctx, "zookeeper "+op, err)
}

// Pauses between attempts while the connection is down: a caller's request
// retries promptly; a clean-up in the background, which nobody waits for,
// backs off further; a Lock whose session ended while queued pauses a
// moment before queueing again in the new session.
var (
	requestRetry = driver.Backoff{Base: 10 * time.Millisecond, Cap: 500 * time.Millisecond, Jitter: 0.5}
	cleanupRetry = driver.Backoff{Base: 10 * time.Millisecond, Cap: time.Second, Jitter: 0.5}
	requeuePause = driver.Backoff{Base: 50 * time.Millisecond, Cap: 50 * time.Millisecond, Jitter: 0.5}
)
