package zklock

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// TestCleanCloseFreesTheLockAtOnce: the package doc's "A clean Close ends
// the session at once". A driver holding a lock on a session of 20s is
// closed without releasing it: the server ends the session and deletes
// its node then, so another client's TryLock right after the Close finds
// the lock free, long before the session could have timed out.
func TestCleanCloseFreesTheLockAtOnce(t *testing.T) {
	z := testenv.StartZooKeeper(t, testenv.ZooKeeperOptions{})
	d := openURL(t, zkURL(z.Addrs(), "/close", "session_timeout=20s"))
	owner := strings.Repeat("c", 32)
	if _, err := d.Acquire(testenv.Context(t, 30*time.Second), driver.Request{Name: "closed", Owner: owner, TTL: d.Capabilities().MinTTL}); err != nil {
		t.Fatal(err)
	}
	other := client(t, openURL(t, zkURL(z.Addrs(), "/close", "")))
	if _, err := other.Mutex("closed").TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock while the driver holds the lock: got %v, want ErrNotAcquired", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := other.Mutex("closed").TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatalf("TryLock right after the holder's driver was closed: %v; Close must end the session and free its locks", err)
	}
	mustUnlock(t, l)
}

// TestLeaseDeadlinePassedInLiveSessionDeletesTheNode: the package doc's
// "If the lease's deadline passes while the session survives (a
// disconnection just longer than the lease), the driver deletes the node
// itself once it can". The holder's session is 20s, but its driver is
// told 4s, so its lease (two thirds of that) runs out while the session
// lives. Its traffic is frozen until its Done closes, then let through:
// the session is the same, and yet another client is granted the lock,
// because the driver deleted the node its holder no longer claims.
func TestLeaseDeadlinePassedInLiveSessionDeletesTheNode(t *testing.T) {
	z := testenv.StartZooKeeper(t, testenv.ZooKeeperOptions{})
	p := testenv.NewProxy(t, z.Servers[0].Addr)
	conn, _, err := zk.Connect([]string{p.Addr()}, 20*time.Second, zk.WithLogger(debugLogger{slog.New(slog.DiscardHandler)}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	testenv.Eventually(t, 30*time.Second, "a session", func() error {
		if s := conn.State(); s != zk.StateHasSession {
			return fmt.Errorf("state %v", s)
		}
		return nil
	})
	d, err := New(conn, WithSessionTimeout(4*time.Second), WithRoot("/deadline"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	session := conn.SessionID()
	l := mustLock(t, client(t, d), "passed")
	p.Block()
	select {
	case <-l.Done():
	case <-time.After(30 * time.Second):
		p.Unblock()
		t.Fatalf("Done not closed 30s after the holder was cut off (lease %v)", l.TTL())
	}
	p.Unblock()
	other := client(t, openURL(t, zkURL(z.Addrs(), "/deadline", "")))
	l2, err := other.Mutex("passed").Lock(testenv.Context(t, 15*time.Second))
	if err != nil {
		t.Fatalf("Lock by another client after the holder's lease ran out in a live session: %v; the driver must delete the node", err)
	}
	if s := conn.SessionID(); s != session {
		t.Fatalf("the holder's session changed (%x to %x): it did not survive the cut, so the test shows nothing", session, s)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token after the lost lease %d, want > %d", l2.Token(), l.Token())
	}
	mustUnlock(t, l2)
}

// TestFailedTryLockDoesNotQueue: the package doc's "a try-lock that finds
// the lock held first only lists the queue, and does not enqueue at all".
// A TryLock of a held lock changes nothing under the lock's parent: its
// child version, which every create and delete of a child moves, stays.
func TestFailedTryLockDoesNotQueue(t *testing.T) {
	z := testenv.StartZooKeeper(t, testenv.ZooKeeperOptions{})
	holder := client(t, openURL(t, zkURL(z.Addrs(), "/try", "")))
	l := mustLock(t, holder, "held")
	d := openURL(t, zkURL(z.Addrs(), "/try", ""))
	cversion := func() int32 {
		t.Helper()
		ok, st, err := d.conn.Exists(d.lockPath("held"))
		if err != nil || !ok {
			t.Fatalf("the lock's parent: exists=%v, %v", ok, err)
		}
		return st.Cversion
	}
	before := cversion()
	for range 3 {
		if _, err := client(t, d).Mutex("held").TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock of a held lock: got %v, want ErrNotAcquired", err)
		}
	}
	if after := cversion(); after != before {
		t.Errorf("the parent's child version moved from %d to %d across failed TryLocks: they created and deleted nodes", before, after)
	}
	mustUnlock(t, l)
}
