package mysqllock

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"
)

// The waiter side of the bells. A waiting Lock registers with its driver
// (no I/O, no goroutine); its goroutine is started, and waits on the
// server, only once an attempt of this driver found the lock held
// ("armed"), so an uncontended Lock costs nothing more than a TryLock. A lock held by this same driver is
// waited for in-process: Release wakes this driver's waiters directly, and
// no session waits on a bell that only this process could ring.

// localName is the driver's own waiters of one lock name.
type localName struct {
	n        int           // waiters registered
	armed    chan struct{} // closed when an attempt found the lock held
	isArmed  bool
	released chan struct{} // closed, and replaced, when this driver releases the lock
	failed   chan struct{} // closed, and replaced, when an attempt found the lock held
	// sem: the last attempt that found it held asked for a semaphore
	// permit; its waiters wait with permitWait, and this driver's
	// releases notify them all directly (waiters blocked on another
	// driver's permit's bell would not see them).
	sem     bool
	waiters map[*waiter]struct{}
}

// waitSession is a connection with the wait statement prepared on it, kept
// for the next waiter while it is clean (no user lock, no kill pending).
type waitSession struct {
	conn  *sql.Conn
	id    uint64
	stmt  *sql.Stmt
	pstmt *sql.Stmt            // permitWait, prepared on first use
	fair  map[string]*sql.Stmt // a fair waiter's statements (fair.go), prepared on first use
}

// closeStmts closes the statements prepared on s.
func (s *waitSession) closeStmts() {
	s.stmt.Close()
	if s.pstmt != nil {
		s.pstmt.Close()
	}
	for _, st := range s.fair {
		st.Close()
	}
}

const maxIdleSessions = 4

// Subscribe implements driver.Subscriber (see the package doc and above).
// stop returns once no statement of the waiter runs on the server: a
// blocked GET_LOCK is ended with KILL QUERY.
func (d *Driver) Subscribe(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if _, err := d.stmt(ctx, d.q.wait); err != nil { // creates the table if needed
		return nil, nil, err
	}
	d.lmu.Lock()
	ln := d.locals[name]
	if ln == nil {
		ln = &localName{armed: make(chan struct{}), released: make(chan struct{}), failed: make(chan struct{}),
			waiters: map[*waiter]struct{}{}}
		d.locals[name] = ln
	}
	ln.n++
	w := &waiter{d: d, ln: ln, name: name, bell: bellName(d.table, name), slots: waitingPrefix(d.table, name), slot: -1,
		wake: make(chan struct{}, 1), stopped: make(chan struct{}), exited: make(chan struct{})}
	ln.waiters[w] = struct{}{}
	if ln.isArmed {
		w.start()
	}
	d.lmu.Unlock()
	return w.wake, w.stop, nil
}

// attemptFailed tells this driver's waiters of name that an attempt found
// the lock held (sem: every permit of the semaphore): the first such
// attempt starts their waits.
func (d *Driver) attemptFailed(name string, sem bool) {
	d.lmu.Lock()
	defer d.lmu.Unlock()
	ln := d.locals[name]
	if ln == nil {
		return
	}
	ln.sem = sem
	if !ln.isArmed {
		ln.isArmed = true
		close(ln.armed)
		for w := range ln.waiters {
			w.start()
		}
	}
	close(ln.failed)
	ln.failed = make(chan struct{})
}

// releasedLocally wakes this driver's waiters of name, and reports whether
// there were any.
func (d *Driver) releasedLocally(name string) bool {
	d.lmu.Lock()
	defer d.lmu.Unlock()
	ln := d.locals[name]
	if ln != nil {
		close(ln.released)
		ln.released = make(chan struct{})
		if ln.sem {
			for w := range ln.waiters {
				w.notify()
			}
		}
	}
	return ln != nil && ln.n > 0
}

func (d *Driver) unregister(name string, w *waiter) {
	d.lmu.Lock()
	defer d.lmu.Unlock()
	ln := w.ln
	delete(ln.waiters, w)
	if ln.n--; ln.n == 0 && d.locals[name] == ln {
		delete(d.locals, name)
	}
}

// sessionOpenTimeout bounds opening a connection for a waiter's GET_LOCK:
// the same bound as the driver's default dial timeout (DefaultOpTimeout).
const sessionOpenTimeout = DefaultOpTimeout

func (d *Driver) takeSession() (*waitSession, error) {
	d.lmu.Lock()
	if n := len(d.idle); n > 0 {
		s := d.idle[n-1]
		d.idle = d.idle[:n-1]
		d.lmu.Unlock()
		return s, nil
	}
	d.lmu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), sessionOpenTimeout)
	defer cancel()
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	s := &waitSession{conn: conn}
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&s.id); err != nil {
		discard(conn)
		return nil, err
	}
	text, err := d.own(ctx, d.q.wait)
	if err == nil {
		s.stmt, err = conn.PrepareContext(ctx, text)
	}
	if err != nil {
		discard(conn)
		return nil, err
	}
	return s, nil
}

// putSession keeps a clean session for reuse, or ends it.
func (d *Driver) putSession(s *waitSession, clean bool) {
	if clean {
		d.lmu.Lock()
		if len(d.idle) < maxIdleSessions && !d.closing {
			d.idle = append(d.idle, s)
			d.lmu.Unlock()
			return
		}
		d.lmu.Unlock()
	}
	s.closeStmts()
	if clean {
		s.conn.Close()
	} else {
		discard(s.conn) // a killed or failed wait may have left a bell taken
	}
}

func (d *Driver) closeSessions() {
	d.lmu.Lock()
	d.closing = true
	idle := d.idle
	d.idle = nil
	d.lmu.Unlock()
	for _, s := range idle {
		s.closeStmts()
		s.conn.Close()
	}
}

type waiter struct {
	d    *Driver
	ln   *localName
	name string
	bell string
	wake chan struct{}
	// slots is the prefix of the name's waiting slots; slot is the one
	// this waiter's session holds, -1 if none.
	slots string
	slot  int

	mu      sync.Mutex
	session *waitSession // while a statement runs
	killed  bool         // stop sent a KILL QUERY to the session
	stopped chan struct{}
	exited  chan struct{}
	once    sync.Once

	// started: run was started; ended: stop was called (run is never
	// started after it). Both are guarded by the driver's lmu.
	started, ended bool
}

// start starts the waiter's goroutine unless it runs or was stopped. The
// caller holds d.lmu.
func (w *waiter) start() {
	if !w.started && !w.ended {
		w.started = true
		go w.run()
	}
}

// Wait statement outcomes (see queries.go).
const (
	waitNoBell  = 0
	waitFree    = 1
	waitHeld    = 2
	waitRang    = 3
	waitOurs    = 4
	waitPending = 5
)

func (w *waiter) run() {
	defer close(w.exited)
	select {
	case <-w.ln.armed:
	case <-w.stopped:
		return
	}
	s, err := w.d.takeSession()
	if err != nil {
		return // the portable layer's safety poll still wakes the waiter
	}
	clean := true
	defer func() {
		if clean && w.slot >= 0 {
			w.d.giveSlotBack(s, w.slots, w.slot)
			return
		}
		w.d.putSession(s, clean)
	}()
	polls, pending := 0, 0
	signalled := false // armed: an attempt has just failed
	for {
		w.d.lmu.Lock()
		released, failed, sem := w.ln.released, w.ln.failed, w.ln.sem
		w.d.lmu.Unlock()
		var ours any
		if id := w.d.bells.ownID(); id != 0 {
			ours = id
		}
		if sem && s.pstmt == nil {
			ctx, cancel := context.WithTimeout(context.Background(), sessionOpenTimeout)
			var text string
			if text, err = w.d.own(ctx, w.d.q.permitWait); err == nil {
				s.pstmt, err = s.conn.PrepareContext(ctx, text)
			}
			cancel()
			if err != nil {
				clean = false
				return
			}
		}
		if !w.enter(s) {
			return
		}
		var st, slot sql.NullInt64
		if sem {
			// The semaphore's wait (permitWait): 0 stands for no bell
			// connection of ours, as no permit's bell column is 0.
			id := w.d.bells.ownID()
			bctx, cancel := w.d.waitBound(waitCap)
			err = s.pstmt.QueryRowContext(bctx, []byte(w.name), waitCap,
				permitBellPrefix(w.d.table, w.name), []byte(w.name), id).Scan(&st)
			cancel()
		} else {
			bctx, cancel := w.d.waitBound(waitCap)
			err = s.stmt.QueryRowContext(bctx, w.waitArgs(ours)...).Scan(&slot, &st)
			cancel()
			if slot.Valid && slot.Int64 >= 0 {
				w.slot = int(slot.Int64)
			}
		}
		killed := w.leave()
		if killed || err != nil {
			clean = false
			return
		}
		if st.Int64 != waitPending && st.Int64 != waitNoBell {
			pending = 0 // a pending bell was taken, or the holder changed
		}
		switch st.Int64 {
		case waitRang:
			// Look again once the attempt this wakes has failed (or
			// after a while): until then the state is in flux, and the
			// lock is likely ours. After a failed attempt, give the
			// winner a moment to take its bell, so as to wait on it
			// rather than poll for it.
			w.notify()
			signalled, polls = true, 0
			t := time.NewTimer(pollMax)
			select {
			case <-failed:
				signalled = false // our waiter waits again: a release is news
				t.Reset(winnerBell)
				select {
				case <-t.C:
				case <-w.stopped:
					t.Stop()
					return
				}
			case <-t.C:
			case <-w.stopped:
				t.Stop()
				return
			}
			t.Stop()
			continue
		case waitHeld:
			signalled, polls = false, 0
			continue
		case waitOurs: // this driver holds it: its Release wakes us
			signalled, polls = false, 0
			t := time.NewTimer(waitCap * time.Second)
			select {
			case <-released:
				t.Stop()
				w.notify()
				signalled = true
				continue
			case <-w.stopped:
				t.Stop()
				return
			case <-t.C:
				continue
			}
		case waitFree: // try, once per free spell
			if !signalled {
				w.notify()
				signalled = true
			}
		case waitPending: // the holder takes its bell in a moment
			signalled = false
			if pending++; pending <= pendingPolls {
				if !w.sleep(pendingPoll) {
					return
				}
				continue
			}
		default: // held without a bell: poll
			signalled = false
		}
		if !w.sleep(heldPoll.Delay(polls)) {
			return
		}
		polls++
	}
}

// waitArgs are the wait statement's parameters.
func (w *waiter) waitArgs(ours any) []any {
	args := make([]any, 0, 7+waitSlots)
	args = append(args, w.slot >= 0)
	for range waitSlots {
		args = append(args, w.slots)
	}
	return append(args, ours, w.bell, w.bell, waitCap, w.bell, w.bell, []byte(w.name))
}

// giveSlotBack releases the waiting slot a stopped waiter's session holds
// and then keeps the session for reuse, in the background: the Lock that
// the waiter served returns without waiting for it. A session that cannot
// release it is ended, which releases it too.
func (d *Driver) giveSlotBack(s *waitSession, prefix string, slot int) {
	d.lmu.Lock()
	if d.closing {
		d.lmu.Unlock()
		d.putSession(s, false)
		return
	}
	d.slotWG.Add(1) // before Close's Wait: Close sets closing first
	d.lmu.Unlock()
	go func() {
		defer d.slotWG.Done()
		ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
		defer cancel()
		// A literal (the prefix is "dlock:w" and hex digits): a text
		// statement, one round trip, where a parameter would prepare.
		_, err := s.conn.ExecContext(ctx, fmt.Sprintf("DO RELEASE_LOCK('%s%d')", prefix, slot))
		d.putSession(s, err == nil)
	}()
}

func (w *waiter) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// enter records that a statement is about to run on s, unless stop was
// called.
func (w *waiter) enter(s *waitSession) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.stopped:
		return false
	default:
	}
	w.session = s
	return true
}

// leave records that the statement ended, and reports whether stop sent a
// KILL QUERY for it.
func (w *waiter) leave() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.session = nil
	return w.killed
}

func (w *waiter) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.stopped:
		return false
	case <-t.C:
		return true
	}
}

// stop ends the subscription and returns (within a bound) once its
// statement has ended on the server. A statement that does not end by
// itself at once is blocked in GET_LOCK: it is ended with KILL QUERY, and
// its session is not reused.
//
// It first gives the statement stopGrace to end by itself (the usual case:
// it was between two waits), then sends KILL QUERY every stopRetry, each
// bounded by killTimeout, and gives up after stopBound, leaving the
// session to the server's own timeouts.
const (
	stopGrace   = 30 * time.Millisecond
	stopRetry   = 200 * time.Millisecond
	killTimeout = 2 * time.Second
	stopBound   = 10 * time.Second
)

func (w *waiter) stop() {
	w.once.Do(func() {
		w.d.lmu.Lock()
		w.ended = true
		started := w.started
		w.d.lmu.Unlock()
		close(w.stopped)
		defer w.d.unregister(w.name, w)
		if !started {
			return // never armed: no goroutine, no statement
		}
		wait := stopGrace
		deadline := time.Now().Add(stopBound)
		for {
			select {
			case <-w.exited:
				return
			case <-time.After(wait):
			}
			if time.Now().After(deadline) {
				return
			}
			w.mu.Lock()
			s := w.session
			if s != nil {
				w.killed = true
			}
			w.mu.Unlock()
			if s != nil {
				ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
				_, _ = w.d.db.ExecContext(ctx, fmt.Sprintf("KILL QUERY %d", s.id))
				cancel()
			}
			wait = stopRetry
		}
	})
}
