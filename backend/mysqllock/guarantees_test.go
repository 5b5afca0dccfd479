package mysqllock

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/internal/testenv"
)

// TestLostLeaseGivesUpItsBell: the package doc's "A bell never outlives
// the lease by the holder's own clock: it is dropped at release, on a
// refused renewal, and when the lease's local deadline passes". A held
// lock is broken; once its holder has seen the loss (Done closed), its
// bell is given up, though the holder never released: waiters are not
// left blocked on the bell of a lease that is gone.
func TestLostLeaseGivesUpItsBell(t *testing.T) {
	s := server{testenv.StartMariaDB(t)}
	db := s.sqlDB(t)
	c := s.client(t, dlock.WithTTL(3*time.Second))
	l, err := c.Mutex("lost-bell").Lock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waitBellHeld(t, db, "lost-bell")
	if err := s.client(t).Break(testenv.Context(t, 30*time.Second), "lost-bell"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the broken holder did not see its loss")
	}
	testenv.Eventually(t, 30*time.Second, "the lost lease's bell to be given up", func() error {
		if bellHeld(t, db, "lost-bell") {
			return errors.New("still held")
		}
		return nil
	})
}

// TestServerCrashWithinTTLKeepsTheLock: the package doc's "Restart of the
// server: committed rows survive. ... live leases stay held and are
// renewed once the server is back (if within their TTL)". The server is
// frozen until a renewal of a held lease has failed, then killed and
// started again well within the lease: the holder keeps its lock, with
// its token.
func TestServerCrashWithinTTLKeepsTheLock(t *testing.T) {
	s := server{testenv.StartMariaDB(t)}
	renewals := &dlocktest.FailedRenewals{Driver: s.open(t, s.Addr, "")}
	holder := dlock.New(renewals, dlock.WithTTL(20*time.Second))
	l, err := holder.Mutex("crash/held").Lock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	dlocktest.HolderKeepsLockAcrossOutage(t, l, renewals, s.client(t), s.Pause, func() { s.Crash(t) })
}
