package pglock

import (
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
	mu   sync.Mutex // pgx connections are not for concurrent use
	conn *pgx.Conn
	set  *sessionSet

	lost     chan struct{} // closed when the watch sees the session end
	stop     chan struct{} // closed when the session is closed by us
	stopOnce sync.Once
}

// watchEvery is how often a held session lock's idle connection is looked
// at for a sign that the server ended it.
const watchEvery = 100 * time.Millisecond

// watch closes x.lost as soon as the idle connection shows that the session
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
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				ended = x.conn.Ping(ctx) != nil && x.conn.IsClosed()
				cancel()
			}
		}
		x.mu.Unlock()
		if ended {
			select {
			case <-x.stop: // released meanwhile: nothing was lost
			default:
				close(x.lost)
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
	closed bool
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
	all := s.conns
	s.conns = map[*session]struct{}{}
	s.mu.Unlock()
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
	x.stopOnce.Do(func() { close(x.stop) })
	x.set.mu.Lock()
	delete(x.set.conns, x)
	x.set.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	x.conn.Close(ctx)
}

// sessionConfig is the configuration of a session lock's connection:
//   - a context that ends during the advisory-lock wait sends the server a
//     cancel request, so no ghost waiter stays in the server's lock queue;
//   - idle_session_timeout = TTL: a holder that stops renewing — cut off
//     by a partition, or frozen — is disconnected by the server, which
//     frees its lock, once the TTL has passed since its last statement;
//   - client_connection_check_interval: a waiter whose client vanished is
//     noticed during its wait.
func sessionConfig(base *pgx.ConnConfig, ttl time.Duration) *pgx.ConnConfig {
	cfg := base.Copy()
	// A connection lives for one lock: preparing its statements would cost
	// a round trip each and never pay off.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: time.Second}
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["idle_session_timeout"] = strconv.FormatInt(max(ttl.Milliseconds(), 1), 10)
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
		t := time.NewTimer(driver.Jitter(min(max(retryAfter, 10*time.Millisecond), time.Second)))
		select {
		case <-ctx.Done():
			t.Stop()
			return driver.Grant{}, ctx.Err()
		case <-t.C:
		}
	}
}

func (d *Driver) trySession(ctx context.Context, req driver.Request, k int64) (driver.Grant, time.Duration, error) {
	conn, err := pgx.ConnectConfig(ctx, sessionConfig(d.pool.Config().ConnConfig, req.TTL))
	if err != nil {
		return driver.Grant{}, 0, d.fail(ctx, err)
	}
	x := &session{conn: conn, set: d.sessions, lost: make(chan struct{}), stop: make(chan struct{})}
	x.mu.Lock() // Close waits for this attempt to finish with the connection
	defer x.mu.Unlock()
	if !x.set.add(x) {
		conn.Close(context.Background())
		return driver.Grant{}, 0, fmt.Errorf("%w: pglock: driver closed", driver.ErrUnavailable)
	}
	// Whatever goes wrong from here, closing the connection undoes it: the
	// server drops the session's advisory lock, granted or queued.
	var got bool
	if req.Wait {
		_, err = conn.Exec(ctx, "SELECT pg_advisory_lock($1)", k)
		got = err == nil
	} else {
		err = conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", k).Scan(&got)
	}
	if err != nil || !got {
		x.closeLocked()
		if err != nil {
			return driver.Grant{}, 0, d.fail(ctx, err)
		}
		return driver.Grant{}, 0, driver.ErrNotAcquired
	}
	sent := time.Now() // the TTL starts with the row, after the wait
	g, retryAfter, err := d.tryAcquire(ctx, conn, req, &k)
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

// extend renews the row's expiry on the lock's own connection, which also
// proves the session alive (and resets the server's idle timeout).
func (x *session) extend(ctx context.Context, d *Driver, h driver.Held, ttl time.Duration) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.conn.IsClosed() {
		return fmt.Errorf("%w: %q: its session has ended", driver.ErrLeaseLost, h.Name)
	}
	err := d.extend(ctx, x.conn, h, ttl)
	if err != nil && x.conn.IsClosed() {
		// The connection died: the advisory lock is gone with it.
		return fmt.Errorf("%w: %q: its session has ended: %w", driver.ErrLeaseLost, h.Name, err)
	}
	return err
}

// release deletes the row and ends the session, which frees the advisory
// lock.
func (x *session) release(ctx context.Context, d *Driver, h driver.Held) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	defer x.closeLocked()
	if x.conn.IsClosed() {
		return fmt.Errorf("%w: %q: its session had ended", driver.ErrLeaseLost, h.Name)
	}
	return d.release(ctx, x.conn, h)
}
