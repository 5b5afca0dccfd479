package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/pglock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/internal/testenv"
)

// startAlone runs t in parallel on a server of its own, and returns the
// server, its URL and a context for t.
func startAlone(t *testing.T) (*testenv.Postgres, string, context.Context) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	return srv, srv.URL(srv.Addr, ""), testenv.Context(t, 90*time.Second)
}

// TestDroppedTableKeepsTokensIncreasing: the package doc's "Dropping the
// table leaves the sequence, on purpose". The token sequence is not owned
// by the lease table, so a table dropped (by an operator, or a migration
// gone wrong) and re-created on next use still draws tokens above every
// token granted before.
func TestDroppedTableKeepsTokensIncreasing(t *testing.T) {
	_, rawURL, ctx := startAlone(t)
	before := newClient(t, rawURL)
	var last uint64
	for range 3 {
		l, err := before.Mutex("dropped/table").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := newPool(t, rawURL).Exec(ctx, "DROP TABLE dlock_leases"); err != nil {
		t.Fatal(err)
	}
	after := newClient(t, rawURL) // creates the table again on first use
	l, err := after.Mutex("dropped/table").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after the table was dropped: %v", err)
	}
	if l.Token() <= last {
		t.Errorf("token after the table was dropped and re-created = %d, want > %d", l.Token(), last)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestBrokenListenConnectionIsMadeAgain: the package doc's "Should the
// LISTEN connection break, ... the connection is made again". A waiter's
// driver listens on one connection; the server ends it
// (pg_terminate_backend); the driver opens a new LISTEN connection, and
// the waiter, still waiting, is granted the lock when the holder releases
// it.
func TestBrokenListenConnectionIsMadeAgain(t *testing.T) {
	srv, rawURL, ctx := startAlone(t)
	admin := newPool(t, rawURL)
	listener := func() (int32, error) {
		var pid int32
		// Idle: it has listened and holds its advisory lock. A connection
		// ended before that is TestListenConnectionEndedWhileMadeIsMadeAgain's
		// case.
		err := admin.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = 'waiter' AND query LIKE 'LISTEN %' AND state = 'idle' ORDER BY backend_start DESC LIMIT 1").Scan(&pid)
		return pid, err
	}

	holder := dlock.New(newDriver(t, rawURL), dlock.WithTTL(time.Minute))
	l, err := holder.Mutex("listen/broken").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := lockInBackground(ctx, dlock.New(newDriver(t, srv.URL(srv.Addr, "application_name=waiter")), dlock.WithTTL(time.Minute)), "listen/broken")
	var old int32
	testenv.Eventually(t, 30*time.Second, "the waiter's LISTEN connection", func() (err error) {
		old, err = listener()
		return err
	})
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", old); err != nil {
		t.Fatal(err)
	}
	w.listensAgain(t, admin, old)
	w.grantedAtRelease(t, l)
}

// backgroundLock is a Lock waiting in the background, while another
// client holds its name, by a driver whose connections are named
// "waiter"; it unlocks at once when granted.
type backgroundLock struct {
	ctx     context.Context
	granted chan error
}

func lockInBackground(ctx context.Context, c *dlock.Client, name string) *backgroundLock {
	w := &backgroundLock{ctx: ctx, granted: make(chan error, 1)}
	go func() {
		lw, err := c.Mutex(name).Lock(ctx)
		if err == nil {
			err = lw.Unlock(ctx)
		}
		w.granted <- err
	}()
	return w
}

// listensAgain waits until the waiter's driver listens (idle) on a
// connection other than the one of server process old; the Lock must not
// return meanwhile.
func (w *backgroundLock) listensAgain(t *testing.T, admin *pgxpool.Pool, old int32) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "a LISTEN connection made again", func() error {
		select {
		case err := <-w.granted:
			return testenv.Final(fmt.Errorf("the waiter's Lock returned while the lock was held: %v", err))
		default:
		}
		var pid int32
		err := admin.QueryRow(w.ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = 'waiter' AND query LIKE 'LISTEN %' AND state = 'idle' ORDER BY backend_start DESC LIMIT 1").Scan(&pid)
		if err == nil && pid == old {
			err = fmt.Errorf("only the terminated one (pid %d)", pid)
		}
		return err
	})
	select {
	case err := <-w.granted:
		t.Fatalf("the waiter's Lock returned while the lock was held: %v", err)
	default:
	}
}

// grantedAtRelease releases the holder's lease l and checks that the
// waiter is then granted.
func (w *backgroundLock) grantedAtRelease(t *testing.T, l *dlock.Lease) {
	t.Helper()
	if err := l.Unlock(w.ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w.granted:
		if err != nil {
			t.Fatalf("waiter after its LISTEN connection was made again: %v", err)
		}
	case <-w.ctx.Done():
		t.Fatal(errors.New("the waiter was never granted the released lock"))
	}
}

// TestListenConnectionEndedWhileMadeIsMadeAgain: the first LISTEN
// connection of a waiter's driver is ended by the server before it
// listens (here while it waits for its advisory lock, which another
// session holds); the driver makes it again, and the waiter, still
// waiting, is granted the lock when the holder releases it. The Lock
// failed with that connection's error before.
func TestListenConnectionEndedWhileMadeIsMadeAgain(t *testing.T) {
	srv, rawURL, ctx := startAlone(t)
	admin := newPool(t, rawURL)
	holder := dlock.New(newDriver(t, rawURL), dlock.WithTTL(time.Minute))
	l, err := holder.Mutex("listen/made").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wd := newDriver(t, srv.URL(srv.Addr, "application_name=waiter"))
	if err := wd.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	key := pglock.ListenKey(wd)
	blocker, err := admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Release()
	if _, err := blocker.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		t.Fatal(err)
	}
	w := lockInBackground(ctx, dlock.New(wd, dlock.WithTTL(time.Minute)), "listen/made")
	var made int32
	testenv.Eventually(t, 30*time.Second, "the waiter's LISTEN connection waiting for its advisory lock", func() error {
		return admin.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = 'waiter' AND query LIKE 'LISTEN %' AND wait_event_type = 'Lock'").Scan(&made)
	})
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", made); err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Exec(ctx, "SELECT pg_advisory_unlock($1)", key); err != nil {
		t.Fatal(err)
	}
	w.listensAgain(t, admin, made)
	w.grantedAtRelease(t, l)
}

// TestServerRestartWithinTTLKeepsTheLock: the package doc's "Server
// restart: ... others remain held and their holders renew them once the
// server is back". The server is frozen until a renewal of a held lease
// has failed, then crashed and started again (crash recovery) well within
// the lease: the holder keeps its lock, with its token.
func TestServerRestartWithinTTLKeepsTheLock(t *testing.T) {
	srv, rawURL, ctx := startAlone(t)
	renewals := &dlocktest.FailedRenewals{Driver: newDriver(t, rawURL)}
	holder := dlock.New(renewals, dlock.WithTTL(20*time.Second))
	l, err := holder.Mutex("restart/held").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dlocktest.HolderKeepsLockAcrossOutage(t, l, renewals, newClient(t, rawURL), srv.Pause, func() { srv.Restart(t) })
}
