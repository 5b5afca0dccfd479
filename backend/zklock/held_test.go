package zklock

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// TestHeldLocksCostNoGoroutineAndABreakLosesOnlyItsLock holds 500 locks
// through one client: holding them, and watching each for a Break once
// its lease was renewed, adds no goroutine per lock — the watches' events
// reach the locks through the driver. The node of one lock is then
// deleted by a plain ZooKeeper connection: exactly that lease is lost, as
// broken; the others are released cleanly.
func TestHeldLocksCostNoGoroutineAndABreakLosesOnlyItsLock(t *testing.T) {
	const held = 500
	z := testenv.StartZooKeeper(t, testenv.ZooKeeperOptions{})
	// A long session (lease 20s), so that few renewals are in flight
	// while the goroutines are counted.
	d := openURL(t, zkURL(z.Addrs(), "/held", "session_timeout=30s"))
	c := client(t, d)
	names := make([]string, held)
	leases := make([]*dlock.Lease, held)
	for i := range names {
		names[i] = "held-" + strconv.Itoa(i)
	}
	base := testenv.SettledGoroutines()
	leases[0] = mustLock(t, c, names[0])
	one := testenv.SettledGoroutines()
	for i := 1; i < held; i++ {
		leases[i] = mustLock(t, c, names[i])
	}
	all := testenv.SettledGoroutines()
	t.Logf("goroutines: %d before, %d holding 1 lock, %d holding %d", base, one, all, held)
	if all-one >= 10 {
		t.Errorf("holding %d locks takes %d goroutines more than holding 1: a goroutine per lock", held, all-one)
	}
	// Each renewal sets a watch on its lock's node: wait until every
	// lease has been renewed since all were taken, then count again.
	taken := time.Now()
	for _, l := range leases {
		waitRenewed(t, l, taken, 2*l.TTL()+30*time.Second, "the locks were taken")
	}
	watched := testenv.SettledGoroutines()
	t.Logf("goroutines: %d holding %d locks, each renewed (and watched)", watched, held)
	if watched-one >= 10 {
		t.Errorf("holding %d renewed locks takes %d goroutines more than holding 1: a goroutine per watch", held, watched-one)
	}

	// A plain connection deletes one lock's node.
	conn := plainConn(t, z.Addrs())
	const broken = held / 2
	parent := d.lockPath(names[broken])
	kids, _, err := conn.Children(parent)
	if err != nil || len(kids) != 1 {
		t.Fatalf("children of %s: %v, %v", parent, kids, err)
	}
	if err := conn.Delete(parent+"/"+kids[0], -1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-leases[broken].Done():
	case <-time.After(60 * time.Second):
		t.Fatal("Done of the lock whose node was deleted not closed 60s later")
	}
	if why := dlock.LossCause(leases[broken].Err()); why != dlock.LossBroken {
		t.Errorf("the lock whose node was deleted was lost as %q (%v), want %q", why, leases[broken].Err(), dlock.LossBroken)
	}
	// Another lock's renewals go on: let each lease renew once more,
	// then release them all.
	again := time.Now()
	for i, l := range leases {
		if i != broken {
			waitRenewed(t, l, again, 2*l.TTL()+30*time.Second, "the deletion")
		}
	}
	for i, l := range leases {
		if i == broken {
			continue
		}
		select {
		case <-l.Done():
			t.Errorf("%s lost with another lock's node: %v", l.Name(), l.Err())
			continue
		default:
		}
		if err := l.Unlock(testenv.Context(t, 30*time.Second)); err != nil {
			t.Errorf("Unlock(%s): %v", l.Name(), err)
		}
	}
	for i, l := range leases {
		if i != broken && errors.Is(l.Err(), dlock.ErrLeaseLost) {
			t.Errorf("%s released, then reported lost: %v", l.Name(), l.Err())
		}
	}
	if err := leases[broken].Unlock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Unlock of the lock whose node was deleted: %v, want ErrLeaseLost", err)
	}
}

// TestDeletedNodeFiresOnlyItsLocksLost: the driver dispatches a watch's
// event to the lock it concerns. Its leases are renewed once each (the
// renewal sets the watch), with the lease deadline out of the way (the
// driver is told the session lasts an hour), so that nothing but the
// watch can report a loss; then a plain connection deletes one lock's
// node. That lock's Lost fires, as a Break (no cause); no other does,
// and the others renew and release cleanly.
func TestDeletedNodeFiresOnlyItsLocksLost(t *testing.T) {
	const held = 50
	z := testenv.StartZooKeeper(t, testenv.ZooKeeperOptions{})
	d := eventDriver(t, z.Addrs()[0])
	ctx := testenv.Context(t, 60*time.Second)
	grants := make([]driver.Grant, held)
	helds := make([]driver.Held, held)
	owner := strings.Repeat("w", 32)
	for i := range grants {
		name := "watched-" + strconv.Itoa(i)
		g, err := d.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: time.Hour, Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		grants[i], helds[i] = g, driver.Held{Name: name, Owner: owner, Token: g.Token, Handle: g.Handle}
		if err := d.Extend(ctx, helds[i], time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	const broken = held / 2
	conn := plainConn(t, z.Addrs())
	if err := conn.Delete(grants[broken].Handle.(*lockNode).path, -1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-grants[broken].Lost.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("Lost of the lock whose watched node was deleted not fired 60s later")
	}
	if cause := grants[broken].Lost.Cause(); cause != nil {
		t.Errorf("Lost of the deleted node fired with %v, want no cause (a Break, not the session's end)", cause)
	}
	for i := range grants {
		if i == broken {
			continue
		}
		if err := d.Extend(ctx, helds[i], time.Hour); err != nil {
			t.Errorf("Extend of lock %d after another lock's node was deleted: %v", i, err)
		}
		if err := d.Release(ctx, helds[i]); err != nil {
			t.Errorf("Release of lock %d: %v", i, err)
		}
	}
	for i, g := range grants {
		if i != broken && g.Lost.Fired() {
			t.Errorf("Lost of lock %d fired (%v): another lock's node was deleted, and it was released", i, g.Lost.Cause())
		}
	}
	if err := d.Extend(ctx, helds[broken], time.Hour); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Extend of the deleted node's lock: %v, want ErrLeaseLost", err)
	}
}

// TestSessionEndLosesEveryHeldLock has a driver hold locks, none of them
// renewed yet (so no watch is set on their nodes), with the lease deadline
// out of the way (the driver is told the session lasts an hour), and cuts
// its traffic until the server has expired the session. When the driver
// reconnects and learns so, every lease is lost, with ErrSessionLost, at
// once: the driver ends the leases of the session it lost, not each lease
// by its own watch.
func TestSessionEndLosesEveryHeldLock(t *testing.T) {
	const held = 50
	z := testenv.StartZooKeeper(t, testenv.ZooKeeperOptions{})
	p := testenv.NewProxy(t, z.Servers[0].Addr)
	d := eventDriver(t, p.Addr())
	ctx := testenv.Context(t, 60*time.Second)
	grants := make([]driver.Grant, held)
	paths := make([]string, held)
	for i := range grants {
		g, err := d.Acquire(ctx, driver.Request{Name: "session-" + strconv.Itoa(i), Owner: strings.Repeat("s", 32), TTL: time.Hour, Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		grants[i], paths[i] = g, g.Handle.(*lockNode).path
	}
	conn := plainConn(t, z.Addrs())
	p.Block()
	defer p.Unblock()
	testenv.Eventually(t, 60*time.Second, "the server to expire the session and delete its nodes", func() error {
		for _, path := range paths {
			if ok, _, err := conn.Exists(path); err != nil || ok {
				return fmt.Errorf("%s: exists %v, %v", path, ok, err)
			}
		}
		return nil
	})
	for i, g := range grants {
		if g.Lost.Fired() {
			t.Fatalf("lock %d reported lost while its driver was cut off: it cannot know yet", i)
		}
	}
	p.Unblock()
	for i, g := range grants {
		select {
		case <-g.Lost.Done():
		case <-time.After(60 * time.Second):
			t.Fatalf("lock %d: Lost not fired 60s after the driver reconnected to an expired session", i)
		}
		if !errors.Is(g.Lost.Cause(), driver.ErrSessionLost) {
			t.Errorf("lock %d: Lost fired with %v, want ErrSessionLost", i, g.Lost.Cause())
		}
	}
}

// eventDriver is hourLeaseDriver over a connection whose events reach the
// driver, as Open's do.
func eventDriver(t *testing.T, addr string) *Driver {
	t.Helper()
	var dp atomic.Pointer[Driver]
	conn, _, err := zk.Connect([]string{addr}, testSession,
		zk.WithLogger(debugLogger{slog.New(slog.DiscardHandler)}), zk.WithLogInfo(false),
		zk.WithEventCallback(func(ev zk.Event) {
			if d := dp.Load(); d != nil {
				d.event(ev)
			}
		}))
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
	d, err := New(conn, WithSessionTimeout(time.Hour), WithRoot("/events"))
	if err != nil {
		t.Fatal(err)
	}
	d.events = true
	dp.Store(d)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// plainConn is a go-zookeeper connection of the test's own.
func plainConn(t *testing.T, addrs []string) *zk.Conn {
	t.Helper()
	conn, _, err := zk.Connect(addrs, testSession, zk.WithLogger(debugLogger{slog.New(slog.DiscardHandler)}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}
