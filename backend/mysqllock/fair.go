package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/dlock/dlock/driver"
	"github.com/go-sql-driver/mysql"
)

// Fair waiting (driver.Request.Fair): a queue table beside the lease table,
// a push hand-off in the release statement, and a chain of queue locks so
// that a hand-off wakes one waiter. See queries.go and the package doc.

// fairLease is the Grant.Handle of a fair mutex's lease: its release hands
// the lock to the queue's first live waiter.
type fairLease struct{}

const (
	// queueSuffix names the queue table after the lease table (sideTable).
	queueSuffix = "_waiters"
	// fairCap is how many seconds a queued waiter blocks at most before it
	// renews its entry and looks again.
	fairCap = 1
	// queueMinTTL is the shortest life of a queue entry without a
	// heartbeat: an entry lives for the request's TTL, but at least this,
	// so that a heartbeat every fairCap keeps it with room to spare.
	queueMinTTL = 3 * time.Second
	// notQueued is the seq of a request that has no entry: every live
	// entry is ahead of it.
	notQueued = math.MaxInt64
	// fairPendingPoll is the first waiter's pause before it looks again
	// when the holder's bell is not taken yet (pendingPoll for plain
	// waiters, who are many).
	fairPendingPoll = 200 * time.Microsecond
)

// queueTable is the queue table's name: the lease table's name followed by
// "_waiters" (sideTable).
func queueTable(table string) string { return sideTable(table, queueSuffix) }

// queueLock is the user lock a queued waiter's session holds while it
// waits: "dlock:q" and driver.NameHash of its owner key (39 characters),
// as queueLive computes it on the server.
func queueLock(owner string) string { return "dlock:q" + driver.NameHash(owner) }

func entryTTL(ttl time.Duration) time.Duration { return max(ttl, queueMinTTL) }

// tryFair is one acquireFair statement: it grants the lock if it is free
// and no live waiter is queued ahead of seq.
func (d *Driver) tryFair(ctx context.Context, req driver.Request, seq int64) (driver.Grant, time.Duration, error) {
	bellArg := d.bellArg(ctx)
	name, ttl := []byte(req.Name), micros(req.TTL)
	sent := driver.Now()
	r, err := exec(ctx, d, d.q.acquireFair, name, req.Owner, req.Holder, bellArg, ttl,
		name, seq, seq, req.Owner, req.Holder, bellArg, ttl)
	if err != nil {
		return driver.Grant{}, 0, err
	}
	id, err := r.LastInsertId()
	if err != nil {
		return driver.Grant{}, 0, d.fail(ctx, err)
	}
	v := uint64(id)
	if v&1 == 0 {
		return driver.Grant{}, time.Duration(v>>1) * time.Microsecond, driver.ErrNotAcquired
	}
	d.bells.hold(bellName(d.table, req.Name), req.Owner, sent.Add(req.TTL), v>>2&1 == 1)
	return driver.Grant{Token: v >> 3, Since: sent, Recovered: v>>1&1 == 1, Handle: fairLease{}}, 0, nil
}

// releaseFair frees owner's lease and hands it to the queue's first live
// waiter, in one statement. It reports whether owner held it. The
// statement goes on the bell connection, where it also drops the lease's
// bell (no second round trip before the first waiter wakes), unless that
// connection is busy or absent; then it goes on a pooled one, and the
// keeper drops the bell after it.
func (d *Driver) releaseFair(ctx context.Context, name, owner string) (bool, error) {
	bell := bellName(d.table, name)
	args := []any{[]byte(name), bell, []byte(name), owner}
	text, err := d.own(ctx, d.q.releaseFair)
	if err != nil {
		return false, err
	}
	octx, cancel := d.bound(ctx)
	r, sent, err := d.bells.execDropping(octx, bell, owner, text, args...)
	cancel()
	if err != nil {
		return false, d.fail(ctx, err)
	}
	if !sent {
		if r, err = exec(ctx, d, d.q.releaseFair, args...); err != nil {
			return false, err
		}
		d.bells.drop(bell, owner)
	}
	d.releasedLocally(name)
	n, err := r.RowsAffected()
	if err != nil {
		return false, d.fail(ctx, err)
	}
	return n > 0, nil
}

// lockFair is a fair Lock: one attempt that passes no live waiter; if it
// is not granted, the caller queues (queued.wait).
func (d *Driver) lockFair(ctx context.Context, req driver.Request) (driver.Grant, error) {
	// Detached from ctx, so that its outcome is known.
	g, _, err := d.tryFair(context.WithoutCancel(ctx), req, notQueued)
	if g, err := driver.GiveBackIfEnded(ctx, g, err, d.fairGiveBack(req)); !errors.Is(err, driver.ErrNotAcquired) {
		return g, err
	}
	s, err := d.takeSession()
	if err != nil {
		return driver.Grant{}, d.fail(ctx, err)
	}
	q := &queued{d: d, s: s, req: req, bell: bellName(d.table, req.Name), lock: queueLock(req.Owner)}
	return q.wait(ctx)
}

// fairGiveBack releases a fair grant whose Lock was cancelled as it came.
func (d *Driver) fairGiveBack(req driver.Request) func(context.Context) {
	return func(ctx context.Context) { _, _ = d.releaseFair(ctx, req.Name, req.Owner) }
}

// permitGiveBack releases a permit g whose Acquire was cancelled as it came.
func (d *Driver) permitGiveBack(req driver.Request, g driver.Grant) func(context.Context) {
	return func(ctx context.Context) {
		_ = d.releasePermit(ctx, driver.Held{Name: req.Name, Owner: req.Owner, Token: g.Token, Handle: g.Handle})
	}
}

// lockFairPermit is a fair semaphore's Acquire: an attempt that passes no
// live waiter; if it is not granted, the caller queues (queued.waitPermit).
func (d *Driver) lockFairPermit(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, _, err := d.tryPermitQueued(context.WithoutCancel(ctx), req, notQueued)
	if g, err := driver.GiveBackIfEnded(ctx, g, err, d.permitGiveBack(req, g)); !errors.Is(err, driver.ErrNotAcquired) {
		return g, err
	}
	s, err := d.takeSession()
	if err != nil {
		return driver.Grant{}, d.fail(ctx, err)
	}
	q := &queued{d: d, s: s, req: req, lock: queueLock(req.Owner), permit: true}
	return q.waitPermit(ctx)
}

// waitPermit queues a fair semaphore's request and tries each time a
// permit's bell rings (permitWait), this driver releases a permit, or
// fairCap passes: a permit is granted only while the live permits and the
// live waiters ahead are fewer than the limit. Nothing is handed off.
func (q *queued) waitPermit(ctx context.Context) (g driver.Grant, err error) {
	d, req := q.d, q.req
	clean := true
	defer func() {
		if err == nil {
			q.leave(clean)
			return
		}
		q.giveUp(ctx, clean)
	}()
	pst, err := q.fairStmt(d.q.permitWait)
	if err != nil {
		clean = false
		return driver.Grant{}, d.fail(ctx, err)
	}
	ln := d.watchLocal(req.Name)
	defer d.unwatchLocal(req.Name, ln)
	if err := q.enqueue(ctx); err != nil {
		clean = false
		return driver.Grant{}, err
	}
	beat := time.Now()
	for polls := 0; ; polls++ {
		if ctx.Err() != nil {
			return driver.Grant{}, ctx.Err()
		}
		released, err := q.pass(ctx, ln, &beat)
		if err != nil {
			clean = false
			return driver.Grant{}, err
		}
		g, _, err := d.tryPermitQueued(context.WithoutCancel(ctx), req, q.seq)
		if g, err := driver.GiveBackIfEnded(ctx, g, err, d.permitGiveBack(req, g)); !errors.Is(err, driver.ErrNotAcquired) {
			return g, err
		}
		var st int64
		killed, err := q.blocking(ctx, func() error {
			bctx, cancel := d.waitBound(fairCap)
			defer cancel()
			return pst.QueryRowContext(bctx, []byte(req.Name), fairCap,
				permitBellPrefix(d.table, req.Name), []byte(req.Name), d.bells.ownID()).Scan(&st)
		})
		if killed || err != nil {
			clean = false
			if ctx.Err() != nil {
				return driver.Grant{}, ctx.Err()
			}
			return driver.Grant{}, d.fail(ctx, err)
		}
		var delay time.Duration
		switch st {
		case waitOurs:
			delay = fairCap * time.Second
		case waitPending:
			delay = pendingPoll
		case waitNoBell:
			delay = heldPoll.Delay(polls)
		default:
			polls = 0
			continue
		}
		t := time.NewTimer(delay)
		select {
		case <-released:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// queued is a fair Lock waiting in the queue, on a session of its own.
type queued struct {
	d    *Driver
	s    *waitSession
	req  driver.Request
	bell string
	lock string // its queue lock
	seq  int64  // its entry, 0 until queued
	// permit: a semaphore's request, which is never handed a lease
	permit bool
}

// fairStmt returns query prepared on the waiter's session.
func (q *queued) fairStmt(query string) (*sql.Stmt, error) {
	if st := q.s.fair[query]; st != nil {
		return st, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), sessionOpenTimeout)
	defer cancel()
	text, err := q.d.own(ctx, query)
	if err != nil {
		return nil, err
	}
	st, err := q.s.conn.PrepareContext(ctx, text)
	if err != nil {
		return nil, err
	}
	if q.s.fair == nil {
		q.s.fair = map[string]*sql.Stmt{}
	}
	q.s.fair[query] = st
	return st, nil
}

// wait queues the request and waits for its turn: a hand-off by a release,
// or a free lock with nobody live ahead. It always leaves the queue before
// it returns; when ctx ends, it also gives back a lock handed to it
// meanwhile.
func (q *queued) wait(ctx context.Context) (g driver.Grant, err error) {
	d, req := q.d, q.req
	clean := true
	defer func() {
		if err == nil {
			q.leave(clean)
			return
		}
		q.giveUp(ctx, clean)
	}()
	wst, err := q.fairStmt(d.q.waitFair)
	if err != nil {
		clean = false
		return driver.Grant{}, d.fail(ctx, err)
	}
	ln := d.watchLocal(req.Name)
	defer d.unwatchLocal(req.Name, ln)
	seen := driver.Now() // the send time of the last statement that found the lock not ours
	if err := q.enqueue(ctx); err != nil {
		clean = false
		return driver.Grant{}, err
	}
	beat := time.Now()
	pending := 0
	for polls := 0; ; polls++ {
		if ctx.Err() != nil {
			return driver.Grant{}, ctx.Err()
		}
		released, err := q.pass(ctx, ln, &beat)
		if err != nil {
			clean = false
			return driver.Grant{}, err
		}
		var ours any
		if id := d.bells.ownID(); id != 0 {
			ours = id
		}
		sent := driver.Now()
		var st, token, leftUS int64
		killed, err := q.blocking(ctx, func() error {
			bctx, cancel := d.waitBound(fairCap)
			defer cancel()
			return wst.QueryRowContext(bctx, req.Owner, fairCap, ours, q.bell, q.bell, fairCap, q.bell,
				[]byte(req.Name), []byte(req.Name), q.seq, []byte(req.Name), req.Owner).Scan(&st, &token, &leftUS)
		})
		if !killed && isRetryable(err) {
			// The re-read after a ring lost a lock conflict: it was
			// rolled back whole, and the session keeps its queue lock.
			continue
		}
		if killed || err != nil {
			clean = false
			if ctx.Err() != nil {
				return driver.Grant{}, ctx.Err()
			}
			return driver.Grant{}, d.fail(ctx, err)
		}
		if st >= 0 && int(st) < len(d.fairWaits) {
			d.fairWaits[st].Add(1)
		}
		if st != waitPending {
			pending = 0
		}
		switch st {
		case waitRangHandedOff:
			// This statement found the lock not ours before it blocked.
			seen = sent
			fallthrough
		case waitHandedOff:
			d.bells.hold(q.bell, req.Owner, seen.Add(req.TTL), true)
			return driver.Grant{Token: uint64(token), Since: seen, Handle: fairLease{}}, nil
		case waitFree:
			g, _, err := d.tryFair(context.WithoutCancel(ctx), req, q.seq)
			if err == nil && !q.endEntry() {
				clean = false
			}
			if g, err := driver.GiveBackIfEnded(ctx, g, err, d.fairGiveBack(req)); !errors.Is(err, driver.ErrNotAcquired) {
				return g, err
			}
			seen = sent
			polls = 0
			continue
		case waitOurs:
			t := time.NewTimer(fairCap * time.Second)
			select {
			case <-released:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		case waitPending:
			// The new holder's bell connection takes its bell one round
			// trip after the grant: look again at once, as the lock is
			// held for less than pendingPoll in many uses, and a waiter
			// that sleeps through the next release is woken late.
			pending++
			delay := fairPendingPoll
			if pending > pendingPolls {
				delay = heldPoll.Delay(pending - pendingPolls)
			}
			if !sleepCtx(ctx, delay) {
				return driver.Grant{}, ctx.Err()
			}
		case waitNoBell:
			delay := heldPoll.Delay(polls)
			if left := time.Duration(leftUS) * time.Microsecond; left > 0 && left < delay {
				delay = left
			}
			if !sleepCtx(ctx, delay) {
				return driver.Grant{}, ctx.Err()
			}
		case waitPredecessor, waitPredecessorL, waitHeld, waitRang:
			polls = 0
		}
		seen = sent
	}
}

// endEntry gives up the queue lock of a waiter that its own attempt
// granted, before its Lock returns (or gives the lock back): its entry,
// which no hand-off ended, is then no longer live, so no release hands the
// lock to it — to an owner whose Lock has returned — again. It reports
// whether the session is still clean; if not, the caller ends the
// session, which drops the lock as well.
func (q *queued) endEntry() bool {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	// A literal ("dlock:q" and hex digits): a text statement, one round
	// trip.
	_, err := q.s.conn.ExecContext(ctx, fmt.Sprintf("DO RELEASE_LOCK('%s')", q.lock))
	return err == nil
}

// enqueue takes the waiter's queue lock and adds its entry, in one round
// trip on its session.
func (q *queued) enqueue(ctx context.Context) error {
	d, req := q.d, q.req
	enq, err := q.fairStmt(d.q.enqueue)
	if err != nil {
		return d.fail(ctx, err)
	}
	octx, cancel := d.bound(context.WithoutCancel(ctx))
	defer cancel()
	r, err := enq.ExecContext(octx, []byte(req.Name), req.Owner, req.Holder, d.bellArg(ctx), micros(req.TTL),
		micros(entryTTL(req.TTL)), q.lock)
	if err == nil {
		var n int64
		if n, err = r.RowsAffected(); err == nil && n != 1 {
			err = fmt.Errorf("mysqllock: the queue lock %s is taken", q.lock)
		}
	}
	if err == nil {
		q.seq, err = r.LastInsertId()
	}
	if err != nil {
		return d.fail(ctx, err)
	}
	return nil
}

// isRetryable is true for InnoDB's deadlock and lock wait timeout errors:
// the statement was rolled back whole.
func isRetryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// pass begins each pass of a queued wait: it renews the waiter's entry
// once a third of its life has passed since beat (an error then ends the
// wait), and returns the channel that this driver's next release of the
// name closes.
func (q *queued) pass(ctx context.Context, ln *localName, beat *time.Time) (<-chan struct{}, error) {
	if time.Since(*beat) >= entryTTL(q.req.TTL)/3 {
		*beat = time.Now()
		if err := q.heartbeat(ctx); err != nil {
			return nil, err
		}
	}
	q.d.lmu.Lock()
	defer q.d.lmu.Unlock()
	return ln.released, nil
}

// heartbeat renews the waiter's entry.
func (q *queued) heartbeat(ctx context.Context) error {
	d := q.d
	st, err := q.fairStmt(d.q.heartbeat)
	if err != nil {
		return d.fail(ctx, err)
	}
	octx, cancel := d.bound(context.WithoutCancel(ctx))
	defer cancel()
	if _, err := st.ExecContext(octx, micros(entryTTL(q.req.TTL)), d.bellArg(ctx), q.seq); err != nil {
		return d.fail(ctx, err)
	}
	return nil
}

// Fair wait outcomes beyond the plain ones (see waitFair).
const (
	waitHandedOff    = 6
	waitPredecessor  = 7 // the wait on the predecessor ran out
	waitPredecessorL = 8 // the predecessor left
	// waitRangHandedOff: the holder's bell rang, and the lock had been
	// handed to this waiter.
	waitRangHandedOff = 9
)

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// blocking runs a statement that may block in GET_LOCK on the waiter's
// session; if ctx ends meanwhile, the statement is ended with KILL QUERY
// and killed reports it (the session is then not reused: a late KILL may
// still be pending on it).
func (q *queued) blocking(ctx context.Context, run func() error) (killed bool, err error) {
	done := make(chan struct{})
	watcher := make(chan bool, 1)
	go func() {
		select {
		case <-done:
			watcher <- false
		case <-ctx.Done():
			kctx, cancel := context.WithTimeout(context.Background(), killTimeout)
			_, _ = q.d.db.ExecContext(kctx, fmt.Sprintf("KILL QUERY %d", q.s.id))
			cancel()
			watcher <- true
		}
	}()
	err = run()
	close(done)
	return <-watcher, err
}

// leave takes a granted waiter out of the queue, in the background: it
// gives up its queue lock first, which wakes its successor, and deletes its
// entry (which the hand-off has ended, or which its queue lock no longer
// keeps live).
func (q *queued) leave(clean bool) {
	d := q.d
	if !clean {
		d.putSession(q.s, false)
		go q.dequeue(context.Background())
		return
	}
	d.lmu.Lock()
	if d.closing {
		d.lmu.Unlock()
		d.putSession(q.s, false)
		return
	}
	d.slotWG.Add(1)
	d.lmu.Unlock()
	go func() {
		defer d.slotWG.Done()
		if d.leaveAfter > 0 {
			time.Sleep(d.leaveAfter)
		}
		ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
		defer cancel()
		// A literal ("dlock:q" and hex digits): a text statement, one
		// round trip.
		_, err := q.s.conn.ExecContext(ctx, fmt.Sprintf("DO RELEASE_LOCK('%s')", q.lock))
		if err == nil {
			var st *sql.Stmt
			if st, err = q.fairStmt(d.q.dequeue); err == nil {
				_, err = st.ExecContext(ctx, []byte(q.req.Name), q.seq)
			}
		}
		d.putSession(q.s, err == nil)
	}()
}

// giveUp takes a waiter that did not get the lock out of the queue before
// Lock returns, and then gives back a lock that a release handed to it
// meanwhile: once its entry is gone, no release hands it the lock again.
func (q *queued) giveUp(ctx context.Context, clean bool) {
	cctx, cancel := driver.CleanupContext(ctx)
	defer cancel()
	if q.seq != 0 {
		q.dequeue(cctx)
	}
	q.d.putSession(q.s, false) // ends the session and with it the queue lock
	if q.seq != 0 && !q.permit {
		_, _ = q.d.releaseFair(cctx, q.req.Name, q.req.Owner)
	}
}

func (q *queued) dequeue(ctx context.Context) {
	_, _ = exec(ctx, q.d, q.d.q.dequeue, []byte(q.req.Name), q.seq)
}

// watchLocal registers a fair waiter of name with this driver, so that this
// driver's releases of name wake it (waitOurs).
func (d *Driver) watchLocal(name string) *localName {
	d.lmu.Lock()
	defer d.lmu.Unlock()
	ln := d.locals[name]
	if ln == nil {
		ln = &localName{armed: make(chan struct{}), released: make(chan struct{}), failed: make(chan struct{}),
			waiters: map[*waiter]struct{}{}}
		d.locals[name] = ln
	}
	ln.n++
	return ln
}

func (d *Driver) unwatchLocal(name string, ln *localName) {
	d.lmu.Lock()
	defer d.lmu.Unlock()
	if ln.n--; ln.n == 0 && d.locals[name] == ln {
		delete(d.locals, name)
	}
}

// queueWaiters reads the holder metadata of name's live queue entries, in
// order; none where the queue table does not exist yet.
func (d *Driver) queueWaiters(ctx context.Context, name string) ([][]byte, error) {
	s, err := d.prepare(ctx, d.q.queueWaiters, false)
	if isNoTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	octx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := s.QueryContext(octx, []byte(name))
	if err != nil {
		return nil, d.fail(ctx, err)
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var h []byte
		if err := rows.Scan(&h); err != nil {
			return nil, d.fail(ctx, err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, d.fail(ctx, err)
	}
	return out, nil
}
