package pglock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/dlock/dlock/driver"
)

// session is the connection of one session lock: it holds the advisory
// lock, and its end frees it.
type session struct {
	mu    sync.Mutex // pgx connections are not for concurrent use
	conn  *pgx.Conn
	set   *sessionSet
	ended bool // released or closed: conn is no longer this lock's

	lost     *driver.Signal // fired when the watch sees the session end
	stop     chan struct{}  // closed when the session is closed by us
	stopOnce sync.Once
}

// watchEvery is how often a held session lock's idle connection is looked
// at for a sign that the server ended it.
const watchEvery = 100 * time.Millisecond

// connCheckTimeout bounds the small talk with a session's server that
// holds no lock decision (a ping, a goodbye, the cancel request sent after
// a deadline): a loopback or LAN server answers in milliseconds, and a
// server that does not answer in a second is treated as gone.
const connCheckTimeout = time.Second

// leaseRetryMin and leaseRetryMax bound the pause of a session-mode waiter
// whose name a lease-mode lease holds: the lease's remaining time says when
// to look, but never busier than a round trip nor lazier than a second,
// since the lease may be released before it expires.
const (
	leaseRetryMin = 10 * time.Millisecond
	leaseRetryMax = time.Second
)

// watch fires x.lost as soon as the idle connection shows that the session
// has ended (the server closed it, or sent the error that precedes the
// close), so that a holder whose connection was cut learns of it within
// about watchEvery rather than at its next renewal. It only peeks at the
// socket; when data is waiting it pings, which reads it.
func (x *session) watch() {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		select {
		case <-x.stop:
			return
		case <-t.C:
		}
		if !x.mu.TryLock() {
			continue // a statement is in flight: it will see for itself
		}
		if x.ended {
			x.mu.Unlock()
			return
		}
		ended := x.conn.IsClosed()
		if !ended {
			closed, data, ok := peekSocket(x.conn.PgConn().Conn())
			switch {
			case !ok:
				x.mu.Unlock()
				return // cannot tell on this platform: renewals will
			case closed:
				ended = true
			case data:
				ctx, cancel := context.WithTimeout(context.Background(), connCheckTimeout)
				ended = x.conn.Ping(ctx) != nil && x.conn.IsClosed()
				cancel()
			}
		}
		x.mu.Unlock()
		if ended {
			select {
			case <-x.stop: // released meanwhile: nothing was lost
			default:
				x.lost.Fire()
			}
			return
		}
	}
}

// sessionSet tracks a driver's session connections, so that Close ends
// them.
type sessionSet struct {
	mu     sync.Mutex
	conns  map[*session]struct{}
	idle   []*pgx.Conn // released connections, holding no lock, for reuse
	closed bool
}

// maxIdleSessions bounds the released connections kept for the next
// session lock: opening a connection (a server process, cold caches) costs
// far more than the lock itself.
const maxIdleSessions = 4

// take returns an idle connection, or nil.
func (s *sessionSet) take() *pgx.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.idle); n > 0 {
		c := s.idle[n-1]
		s.idle = s.idle[:n-1]
		return c
	}
	return nil
}

// park keeps a connection that holds no lock for reuse, or closes it.
func (s *sessionSet) park(c *pgx.Conn) {
	s.mu.Lock()
	if !s.closed && len(s.idle) < maxIdleSessions && !c.IsClosed() {
		s.idle = append(s.idle, c)
		c = nil
	}
	s.mu.Unlock()
	if c != nil {
		closeConn(c)
	}
}

func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), connCheckTimeout)
	defer cancel()
	c.Close(ctx)
}

func (s *sessionSet) add(x *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[x] = struct{}{}
	return true
}

func (s *sessionSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	all, idle := s.conns, s.idle
	s.conns, s.idle = map[*session]struct{}{}, nil
	s.mu.Unlock()
	for _, c := range idle {
		closeConn(c)
	}
	for x := range all {
		// Cut the socket first (safe while a statement is in flight on
		// it), so that an Extend stuck in a partition ends now.
		_ = x.conn.PgConn().Conn().Close()
		x.mu.Lock()
		x.closeLocked()
		x.mu.Unlock()
	}
}

// closeLocked ends the session, and with it the advisory lock. The caller
// holds x.mu.
func (x *session) closeLocked() {
	x.endLocked()
	closeConn(x.conn)
}

// endLocked detaches the session from its connection. The caller holds
// x.mu.
func (x *session) endLocked() {
	x.ended = true
	x.stopOnce.Do(func() { close(x.stop) })
	x.set.mu.Lock()
	delete(x.set.conns, x)
	x.set.mu.Unlock()
}

// sessionConfig is the configuration of a session lock's connection:
//   - a context that ends during the advisory-lock wait sends the server a
//     cancel request, so no ghost waiter stays in the server's lock queue;
//   - client_connection_check_interval: a waiter whose client vanished is
//     noticed during its wait.
func sessionConfig(base *pgx.ConnConfig) *pgx.ConnConfig {
	cfg := base.Copy()
	// Statements go unprepared, each batch in one round trip.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: connCheckTimeout}
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["client_connection_check_interval"] = "1000"
	return cfg
}

// acquireSession takes a session lock: a connection of its own, the
// advisory lock on the name's key (waiting in the server's lock queue if
// req.Wait), then the lease row with a fresh token from the sequence.
func (d *Driver) acquireSession(ctx context.Context, req driver.Request) (driver.Grant, error) {
	k := d.key(req.Name)
	for {
		g, retryAfter, err := d.trySession(ctx, req, k)
		if err == nil || !errors.Is(err, driver.ErrNotAcquired) || !req.Wait {
			return g, err
		}
		// The advisory lock was ours but a lease of the table (a client in
		// lease mode) holds the name: wait for it to end.
		t := time.NewTimer(driver.Jitter(min(max(retryAfter, leaseRetryMin), leaseRetryMax)))
		select {
		case <-ctx.Done():
			t.Stop()
			return driver.Grant{}, ctx.Err()
		case <-t.C:
		}
	}
}

func (d *Driver) trySession(ctx context.Context, req driver.Request, k int64) (driver.Grant, time.Duration, error) {
	conn, reused := d.sessions.take(), true
	for {
		if conn == nil {
			var err error
			cctx, cancel := d.bound(ctx)
			conn, err = pgx.ConnectConfig(cctx, sessionConfig(d.pool.Config().ConnConfig))
			cancel()
			if err != nil {
				return driver.Grant{}, 0, d.fail(ctx, err)
			}
			reused = false
		}
		g, retryAfter, err := d.lockOn(ctx, conn, req, k)
		if err != nil && reused && conn.IsClosed() && ctx.Err() == nil {
			// The idle connection had died (a server restart): use a new one.
			conn = nil
			continue
		}
		return g, retryAfter, err
	}
}

// lockOn takes the advisory lock and writes the row on conn.
func (d *Driver) lockOn(ctx context.Context, conn *pgx.Conn, req driver.Request, k int64) (driver.Grant, time.Duration, error) {
	x := &session{conn: conn, set: d.sessions, lost: driver.NewSignal(), stop: make(chan struct{})}
	x.mu.Lock() // Close waits for this attempt to finish with the connection
	defer x.mu.Unlock()
	if !x.set.add(x) {
		closeConn(conn)
		return driver.Grant{}, 0, fmt.Errorf("%w: pglock: driver closed", driver.ErrUnavailable)
	}
	// Whatever goes wrong from here, closing the connection undoes it: the
	// server drops the session's advisory lock, granted or queued.
	//
	// One round trip: idle_session_timeout = TTL, so that a holder that
	// stops renewing — cut off by a partition, or frozen — is disconnected
	// by the server, which frees its lock, once the TTL has passed since its
	// last statement; lock_timeout = the driver's timeout, so that a wait
	// in the server's lock queue comes back (55P03) at least that often
	// and a server that stops answering is noticed; then the lock.
	b := &pgx.Batch{}
	b.Queue("SELECT set_config('idle_session_timeout', $1, false), set_config('lock_timeout', $2, false)",
		strconv.FormatInt(max(req.TTL.Milliseconds(), 1), 10), strconv.FormatInt(max(d.timeout.Milliseconds(), 1), 10))
	lockSQL := "SELECT pg_try_advisory_lock($1)"
	if req.Wait {
		lockSQL = "SELECT pg_advisory_lock($1)::text IS NOT NULL"
	}
	b.Queue(lockSQL, k)
	// Each round trip is bounded by the driver's timeout, beyond the
	// server's lock_timeout for a wait.
	bctx, cancel := context.WithTimeout(ctx, 2*d.timeout)
	br := conn.SendBatch(bctx, b)
	var got bool
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&got)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	cancel()
	for req.Wait && isLockTimeout(err) && ctx.Err() == nil {
		// The wait's slice ran out: the server answers, so wait again.
		bctx, cancel := context.WithTimeout(ctx, 2*d.timeout)
		err = conn.QueryRow(bctx, lockSQL, k).Scan(&got)
		cancel()
	}
	if err != nil || !got {
		if err == nil { // not taken, nothing held: keep the connection
			x.endLocked()
			x.set.park(conn)
			return driver.Grant{}, 0, driver.ErrNotAcquired
		}
		x.closeLocked()
		return driver.Grant{}, 0, d.fail(ctx, err)
	}
	sent := driver.Now() // the TTL starts with the row, after the wait
	g, retryAfter, err := d.tryAcquire(ctx, conn, req, &k)
	if errors.Is(err, driver.ErrNotAcquired) {
		// A lease of the table holds the name. Free the advisory lock now,
		// not when the server has noticed a closed connection: a Lock that
		// comes right after that lease's release must not find it held by
		// this attempt's exiting server process.
		x.giveBack(ctx, d)
		return driver.Grant{}, retryAfter, err
	}
	if err != nil {
		x.closeLocked()
		return driver.Grant{}, retryAfter, err
	}
	g.Since = sent
	g.Handle = x
	g.Lost = x.lost
	go x.watch()
	return g, 0, nil
}

// unlockAllSQL frees every advisory lock of the session, and lets its
// connection idle without being disconnected, for the next session lock.
const unlockAllSQL = "SELECT pg_advisory_unlock_all(), set_config('idle_session_timeout', '0', false)"

// giveBack frees the advisory lock of an attempt that did not get the row,
// and keeps the connection for the next session lock (or closes it if the
// statement fails). The caller holds x.mu.
func (x *session) giveBack(ctx context.Context, d *Driver) {
	octx, cancel := d.bound(ctx)
	_, err := x.conn.Exec(octx, unlockAllSQL)
	cancel()
	if err != nil {
		x.closeLocked()
		return
	}
	x.endLocked()
	x.set.park(x.conn)
}

// isLockTimeout reports a statement ended by lock_timeout.
func isLockTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

// extend renews the row's expiry on the lock's own connection, which also
// proves the session alive (and resets the server's idle timeout).
func (x *session) extend(ctx context.Context, d *Driver, h driver.Held, ttl time.Duration) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ended || x.conn.IsClosed() {
		return fmt.Errorf("%w: %q: its session has ended", driver.ErrLeaseLost, h.Name)
	}
	err := d.extend(ctx, x.conn, h, ttl)
	if err != nil && x.conn.IsClosed() {
		// The connection died: the advisory lock is gone with it.
		return fmt.Errorf("%w: %q: its session has ended: %w", driver.ErrLeaseLost, h.Name, err)
	}
	return err
}

// release frees the row and the advisory lock in one round trip. Unlocking
// explicitly hands the lock to the next waiter at once, rather than when
// the server process of this session has exited; the connection, holding
// nothing, is kept for the next session lock.
func (x *session) release(ctx context.Context, d *Driver, h driver.Held) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ended || x.conn.IsClosed() {
		x.closeLocked()
		return fmt.Errorf("%w: %q: its session had ended", driver.ErrLeaseLost, h.Name)
	}
	// One pipeline, one implicit transaction: the advisory lock is freed as
	// the second statement runs, the row when it commits; a waiter that gets
	// the advisory lock first waits for the row, and sees it free.
	queue := func(b *pgx.Batch) {
		b.Queue(d.releaseSQL, d.releaseArgs(h)...)
		b.Queue(unlockAllSQL)
	}
	var err, uerr error // the release's, the unlock's
	read := func(br pgx.BatchResults) error {
		err = br.QueryRow().Scan(nil)
		_, uerr = br.Exec()
		return uerr
	}
	octx, cancel := d.bound(ctx)
	defer cancel()
	b := &pgx.Batch{}
	queue(b)
	br := x.conn.SendBatch(octx, b)
	_ = read(br)
	if cerr := br.Close(); uerr == nil {
		uerr = cerr
	}
	if serializationFailure(err) { // see readCommitted: nothing was freed
		uerr = inReadCommitted(octx, x.conn, queue, read)
	}
	if uerr != nil {
		x.closeLocked()
	} else {
		x.endLocked()
		x.set.park(x.conn)
	}
	if sessionTerminated(err) || sessionTerminated(uerr) {
		// Break (pg_terminate_backend) or a server shutdown ended the
		// session before our release ran: its advisory lock went with it,
		// and the lock may be someone else's by now.
		return fmt.Errorf("%w: %q: its session was terminated by the server: %w", driver.ErrLeaseLost, h.Name, cmp.Or(err, uerr))
	}
	return d.released(ctx, h, err)
}

// sessionTerminated reports whether err is the server ending the session:
// an administrator's or a shutdown's termination (SQLSTATE 57P01, 57P02).
func sessionTerminated(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "57P01" || pe.Code == "57P02")
}
