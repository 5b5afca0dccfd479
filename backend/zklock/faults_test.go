package zklock

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"

	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// opener opens a driver on the deployment under test, with root as its root.
type opener func(t testing.TB, root string) *Driver

func client(t testing.TB, d *Driver) *dlock.Client {
	return dlock.New(d, dlock.WithTTL(d.Capabilities().MinTTL))
}

func mustLock(t testing.TB, c *dlock.Client, name string) *dlock.Lease {
	t.Helper()
	l, err := c.Mutex(name).Lock(testenv.Context(t, 60*time.Second))
	if err != nil {
		t.Fatalf("Lock(%q): %v", name, err)
	}
	return l
}

func mustUnlock(t testing.TB, l *dlock.Lease) {
	t.Helper()
	if err := l.Unlock(testenv.Context(t, 30*time.Second)); err != nil {
		t.Fatalf("Unlock(%q): %v", l.Name(), err)
	}
}

// renewedSince reports whether a renewal of l sent after t was confirmed:
// its deadline is then the renewal's send time plus the TTL less 1%.
func renewedSince(l *dlock.Lease, t time.Time) bool {
	return l.Expires().After(t.Add(l.TTL() * 98 / 100))
}

// waitRenewed waits until l has a renewal confirmed after since.
func waitRenewed(t *testing.T, l *dlock.Lease, since time.Time, timeout time.Duration, after string) {
	t.Helper()
	testenv.Eventually(t, timeout, "a renewal confirmed after "+after, func() error {
		if !renewedSince(l, since) {
			return fmt.Errorf("lease expires %v, lost: %v", l.Expires(), l.Err())
		}
		return nil
	})
}

// testNoHerd queues five waiters and asks the server who watches what:
// nobody may watch the queue's parent (a children watch wakes everyone on
// every change), and each lock node is watched by at most the two waiters
// behind it (and its owner, once its lease was renewed), so that a release
// wakes two waiters at most.
func testNoHerd(t *testing.T, z *testenv.ZooKeeper, open opener) {
	const waiters = 5
	d := open(t, "/herd")
	holder, inspector := client(t, d), client(t, open(t, "/herd"))
	name := "herd"
	l := mustLock(t, holder, name)
	errs := make(chan error, waiters)
	for range waiters {
		c := client(t, open(t, "/herd"))
		go func() {
			lw, err := c.Mutex(name).Lock(testenv.Context(t, 120*time.Second))
			if err == nil {
				err = lw.Unlock(testenv.Context(t, 30*time.Second))
			}
			errs <- err
		}()
	}
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d waiters to queue", waiters), func() error {
		in, err := inspector.Inspect(testenv.Context(t, 30*time.Second), name)
		if err == nil && len(in.Waiters) != waiters {
			err = fmt.Errorf("%d queued", len(in.Waiters))
		}
		return err
	})
	parent := d.lockPath(name)
	// Watches are set right after a waiter shows in the queue: wait until
	// every node but the last is watched.
	var watched map[string]int
	_ = testenv.Poll(10*time.Second, func() error {
		watched = watchesByPath(t, z.Servers[0])
		n := 0
		for p, c := range watched {
			if strings.HasPrefix(p, parent+"/") && c >= 1 {
				n++
			}
		}
		if n != waiters {
			return fmt.Errorf("%d nodes watched", n)
		}
		return nil
	})
	nodes := 0
	for p, sessions := range watched {
		switch {
		case p == parent:
			t.Errorf("%d sessions watch the queue's parent %s: every change wakes them all", sessions, p)
		case strings.HasPrefix(p, parent+"/"):
			nodes++
			if sessions > 3 {
				t.Errorf("%s is watched by %d sessions; want at most the two waiters behind it and its owner", p, sessions)
			}
		}
	}
	if nodes < waiters {
		t.Errorf("%d lock nodes watched, want at least %d (all but the last waiter's)\n%v", nodes, waiters, watched)
	}
	mustUnlock(t, l)
	for range waiters {
		if err := <-errs; err != nil {
			t.Errorf("waiter: %v", err)
		}
	}
}

// watchesByPath parses the four-letter word wchp: each watched path,
// followed by the sessions watching it, indented.
func watchesByPath(t *testing.T, s *testenv.ZooKeeperServer) map[string]int {
	t.Helper()
	out, err := s.FourLetter("wchp")
	if err != nil {
		t.Fatalf("wchp: %v", err)
	}
	m := map[string]int{}
	var path string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "/"):
			path = line
			m[path] = 0
		case strings.TrimSpace(line) != "" && path != "":
			m[path]++
		}
	}
	return m
}

// testPausedServer freezes the server for longer than the session
// timeout: the holder's Done closes while the server is frozen, and once
// it thaws, another client is granted the lock with a higher token.
func testPausedServer(t *testing.T, z *testenv.ZooKeeper, open opener) {
	srv := z.Servers[0]
	holder := client(t, open(t, "/faults"))
	name := "paused"
	l := mustLock(t, holder, name)
	srv.Pause()
	paused := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	select {
	case <-l.Done():
		t.Logf("Done closed %v after the server froze (lease %v)", time.Since(paused).Round(time.Millisecond), l.TTL())
	case <-time.After(3 * testSession):
		t.Fatalf("Done not closed %v after the server froze (lease %v)", 3*testSession, l.TTL())
	}
	if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
		t.Errorf("Err = %v, want ErrLeaseLost", l.Err())
	}
	// Past the session timeout, so that the server expires the session
	// when it thaws (or the holder, reconnecting first, deletes its node).
	time.Sleep(time.Until(paused.Add(testSession + time.Second)))
	srv.Resume()
	resumed = true
	l2 := mustLock(t, client(t, open(t, "/faults")), name)
	if l2.Token() <= l.Token() {
		t.Errorf("token after the session expired %d, want > %d", l2.Token(), l.Token())
	}
	mustUnlock(t, l2)
}

// hourLeaseDriver opens a driver on its own connection to addr with a
// testSession session, but tells it the session lasts an hour: its leases'
// deadlines are then out of the way, and only the server's verdict on the
// session can end them. Both are closed when the test ends.
func hourLeaseDriver(t *testing.T, addr string) *Driver {
	t.Helper()
	conn, _, err := zk.Connect([]string{addr}, testSession, zk.WithLogger(debugLogger{slog.New(slog.DiscardHandler)}), zk.WithLogInfo(false))
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
	d, err := New(conn, WithSessionTimeout(time.Hour), WithRoot("/faults"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// testServerEndsSession makes the server expire a holder's session while
// its traffic is blocked, with the lease deadline out of the way (the
// driver is told the session lasts an hour): the server's verdict alone,
// seen by the holder's watch when it reconnects, must close Grant.Lost,
// and another client must be granted the lock meanwhile with a higher
// token.
func testServerEndsSession(t *testing.T, z *testenv.ZooKeeper, open opener) {
	p := testenv.NewProxy(t, z.Servers[0].Addr)
	d := hourLeaseDriver(t, p.Addr())
	name := "expired-session"
	g, err := d.Acquire(testenv.Context(t, 30*time.Second), driver.Request{Name: name, Owner: strings.Repeat("e", 32), TTL: time.Hour, Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	held := driver.Held{Name: name, Owner: strings.Repeat("e", 32), Token: g.Token, Handle: g.Handle}
	if err := d.Extend(testenv.Context(t, 30*time.Second), held, time.Hour); err != nil { // a renewal: the holder watches its node from now on
		t.Fatal(err)
	}
	p.Block()
	other := client(t, open(t, "/faults"))
	l2 := mustLock(t, other, name) // granted once the server expired the session
	select {
	case <-g.Lost.Done():
		t.Fatal("Lost closed while the holder was cut off: it cannot know yet")
	default:
	}
	if l2.Token() <= g.Token {
		t.Errorf("token after the session expired %d, want > %d", l2.Token(), g.Token)
	}
	p.Unblock()
	select {
	case <-g.Lost.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Lost not closed 30s after the holder reconnected to learn its session expired")
	}
	if cause := g.Lost.Cause(); !errors.Is(cause, driver.ErrSessionLost) {
		t.Errorf("Lost fired with cause %v, want ErrSessionLost (a loss the client can tell from a Break)", cause)
	}
	if err := d.Extend(testenv.Context(t, 30*time.Second), held, time.Hour); !errors.Is(err, driver.ErrSessionLost) {
		t.Errorf("Extend after the session expired: %v, want ErrSessionLost", err)
	}
	if err := d.Release(testenv.Context(t, 30*time.Second), held); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Release after the session expired: %v, want ErrLeaseLost", err)
	}
	if _, err := other.Mutex(name).TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("the new holder's lock must still be held; TryLock: %v", err)
	}
	mustUnlock(t, l2)
}

// testShortDisconnectKeepsLease cuts and briefly freezes a holder's
// connection: go-zookeeper reconnects within the session and the lease
// survives, with the same node and token.
func testShortDisconnectKeepsLease(t *testing.T, z *testenv.ZooKeeper, open opener) {
	p := testenv.NewProxy(t, z.Servers[0].Addr)
	holder := client(t, openURL(t, zkURL([]string{p.Addr()}, "/faults", "session_timeout="+testSession.String())))
	name := "short-disconnect"
	l := mustLock(t, holder, name)
	// A closed connection (go-zookeeper redials after about a second),
	// then a silent one.
	p.Cut()
	cut := time.Now()
	waitRenewed(t, l, cut, 2*l.TTL()+10*time.Second, "the connection was closed")
	p.Block()
	time.Sleep(l.TTL() / 4)
	p.Unblock()
	unblocked := time.Now()
	waitRenewed(t, l, unblocked, 2*l.TTL()+10*time.Second, "the silence")
	select {
	case <-l.Done():
		t.Fatalf("lease lost across a short disconnection: %v", l.Err())
	default:
	}
	in, err := client(t, open(t, "/faults")).Inspect(testenv.Context(t, 30*time.Second), name)
	if err != nil || !in.Held || in.Token != l.Token() {
		t.Fatalf("Inspect after the reconnection: %+v, %v; want held with token %d", in, err, l.Token())
	}
	mustUnlock(t, l)
}

// testCutsLeaveNoOrphans cuts the connection at random moments while Lock
// runs, many times: creates whose replies were lost must be found (or
// cleaned up), so that afterwards no node of ours is left in the queue.
func testCutsLeaveNoOrphans(t *testing.T, z *testenv.ZooKeeper, _ opener) {
	cutLocksLeaveNoOrphans(t, z, "/faults", "session_timeout="+testSession.String(), "cuts")
}

// cutLocksLeaveNoOrphans is testCutsLeaveNoOrphans for the drivers of a
// root and query, on lock name.
func cutLocksLeaveNoOrphans(t *testing.T, z *testenv.ZooKeeper, root, query, name string) {
	p := testenv.NewProxy(t, z.Servers[0].Addr)
	d := openURL(t, zkURL([]string{p.Addr()}, root, query))
	c := client(t, d)
	// Each cut costs about a second: go-zookeeper waits that long before
	// it dials a server list it has been through again.
	const cuts = 12
	granted := 0
	for range cuts {
		cut := make(chan struct{})
		go func() {
			defer close(cut)
			time.Sleep(time.Duration(rand.N(3000)) * time.Microsecond)
			p.Cut()
		}()
		l, err := c.Mutex(name).Lock(testenv.Context(t, 30*time.Second))
		<-cut
		switch {
		case err == nil:
			granted++
			_ = l.Unlock(testenv.Context(t, 30*time.Second)) // a cut may fail it; the driver deletes the node later
		case !errors.Is(err, dlock.ErrUnavailable):
			t.Fatalf("Lock with a cut connection: %v, want success or ErrUnavailable", err)
		}
	}
	if granted == 0 {
		t.Fatalf("no Lock succeeded across %d cuts", cuts)
	}
	inspector := client(t, openURL(t, zkURL(z.Addrs(), root, query)))
	var in dlock.Info
	testenv.Eventually(t, 2*testSession+10*time.Second, fmt.Sprintf("an empty queue after %d cut Locks (%d granted and released)", cuts, granted), func() error {
		var err error
		in, err = inspector.Inspect(testenv.Context(t, 30*time.Second), name)
		if err == nil && (in.Held || len(in.Waiters) != 0) {
			err = fmt.Errorf("%+v", in)
		}
		return err
	})
}

// testDigestACL takes a lock as one digest identity: another identity and
// an anonymous client can neither delete its node, nor break, read or take
// the lock.
func testDigestACL(t *testing.T, z *testenv.ZooKeeper) {
	q := "session_timeout=" + testSession.String()
	alice := openURL(t, strings.Replace(zkURL(z.Addrs(), "/acl", q), "zk://", "zk://alice:s3cret@", 1))
	bob := openURL(t, strings.Replace(zkURL(z.Addrs(), "/acl", q), "zk://", "zk://bob:0ther@", 1))
	anon := openURL(t, zkURL(z.Addrs(), "/acl", q))
	name := "ledger"
	l := mustLock(t, client(t, alice), name)
	parent := alice.lockPath(name)
	kids, _, err := alice.Conn().Children(parent)
	if err != nil || len(kids) != 1 {
		t.Fatalf("children of %s: %v, %v", parent, kids, err)
	}
	node := parent + "/" + kids[0]
	acl, _, err := alice.Conn().GetACL(node)
	if err != nil || len(acl) != 1 || acl[0].Scheme != "digest" || !strings.HasPrefix(acl[0].ID, "alice:") || acl[0].Perms != zk.PermAll {
		t.Errorf("ACL of the lock node: %+v, %v; want digest alice with all permissions only", acl, err)
	}
	for who, d := range map[string]*Driver{"bob": bob, "anonymous": anon} {
		if err := d.Conn().Delete(node, -1); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("%s deleting alice's lock node: %v, want zk.ErrNoAuth", who, err)
		}
		c := client(t, d)
		if err := c.Break(testenv.Context(t, 30*time.Second), name); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("%s breaking alice's lock: %v, want an error wrapping zk.ErrNoAuth", who, err)
		}
		if _, err := c.Inspect(testenv.Context(t, 30*time.Second), name); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("%s inspecting alice's lock: %v, want an error wrapping zk.ErrNoAuth", who, err)
		}
		if _, err := c.Mutex(name).TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("%s taking alice's lock: %v, want an error wrapping zk.ErrNoAuth", who, err)
		}
	}
	select {
	case <-l.Done():
		t.Fatalf("alice lost her lease: %v", l.Err())
	default:
	}
	in, err := client(t, alice).Inspect(testenv.Context(t, 30*time.Second), name)
	if err != nil || !in.Held || in.Token != l.Token() {
		t.Errorf("alice's Inspect: %+v, %v; want held with token %d", in, err, l.Token())
	}
	if err := client(t, alice).Break(testenv.Context(t, 30*time.Second), name); err != nil {
		t.Errorf("alice breaking her own lock: %v", err)
	}
	select {
	case <-l.Done():
	case <-time.After(30 * time.Second):
		t.Error("Done not closed 30s after Break")
	}
}

// testEmptyParentsGo checks that lock parents do not pile up: the server
// deletes them once empty, and a lock whose parent is deleted between two
// uses is still granted (the create that finds no parent makes it again).
func testEmptyParentsGo(t *testing.T, z *testenv.ZooKeeper, open opener) {
	d := open(t, "/containers")
	c := client(t, d)
	for i := range 20 {
		mustUnlock(t, mustLock(t, c, "name-"+string(rune('a'+i))))
	}
	var kids []string
	testenv.Eventually(t, 30*time.Second, "the empty lock parents under "+d.root+" to go", func() error {
		var err error
		kids, _, err = d.Conn().Children(d.root)
		if err == nil && len(kids) != 0 {
			err = fmt.Errorf("%d left: %v", len(kids), kids)
		}
		return err
	})
	name := "reused"
	parents := map[int64]bool{}
	for range 8 {
		l := mustLock(t, c, name)
		_, st, err := d.Conn().Exists(d.lockPath(name))
		if err != nil {
			t.Fatal(err)
		}
		parents[st.Czxid] = true
		mustUnlock(t, l)
		time.Sleep(driver.Jitter(time.Second)) // around the server's 500ms check
	}
	if len(parents) < 2 {
		t.Errorf("the parent of %q was never deleted and re-created across 8 uses", name)
	}
}

// testRestarts restarts the server while locks are held, with the outcome
// the package documentation states: a holder whose lease outlasts the
// outage keeps its lock (same token); one whose lease ran out during the
// outage has lost it, and the next grant's token is higher.
func testRestarts(t *testing.T, z *testenv.ZooKeeper, open opener) {
	t.Run("OutageShorterThanLeaseKeepsLock", func(t *testing.T) {
		// A 60s session (a 40s lease): a JVM restarting on a machine
		// busy with other tests can take over ten seconds to serve
		// again, and the outage must stay shorter than the lease.
		long := openURL(t, zkURL(z.Addrs(), "/restart", "session_timeout=60s"))
		l := mustLock(t, client(t, long), "short")
		began := time.Now()
		z.Restart(t)
		restarted := time.Now()
		t.Logf("the server was back %v after the restart began", restarted.Sub(began).Round(time.Millisecond))
		waitRenewed(t, l, restarted, 2*l.TTL(), "the restart")
		select {
		case <-l.Done():
			t.Fatalf("lease lost across a restart shorter than it: %v", l.Err())
		default:
		}
		other := client(t, open(t, "/restart"))
		if _, err := other.Mutex("short").TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryLock of the kept lock: %v, want ErrNotAcquired", err)
		}
		mustUnlock(t, l)
		l2 := mustLock(t, other, "short")
		if l2.Token() <= l.Token() {
			t.Errorf("token after restart %d, want > %d", l2.Token(), l.Token())
		}
		mustUnlock(t, l2)
	})
	t.Run("OutageLongerThanLeaseLosesLock", func(t *testing.T) {
		srv := z.Servers[0]
		l := mustLock(t, client(t, open(t, "/restart")), "long")
		srv.Kill()
		killed := time.Now()
		select {
		case <-l.Done():
		case <-time.After(3 * testSession):
			srv.Start(t)
			t.Fatalf("Done not closed %v into the outage (lease %v)", 3*testSession, l.TTL())
		}
		time.Sleep(time.Until(killed.Add(testSession)))
		srv.Start(t)
		l2 := mustLock(t, client(t, open(t, "/restart")), "long")
		if l2.Token() <= l.Token() {
			t.Errorf("token after restart %d, want > %d", l2.Token(), l.Token())
		}
		mustUnlock(t, l2)
	})
}

// testLeaderStopped kills the ensemble's leader: the two other servers
// elect a new one and the lock keeps being granted, with increasing tokens;
// the holder of another lock either keeps it (it reconnected within its
// lease) or sees it lost — never both it and someone else hold it.
func testLeaderStopped(t *testing.T, z *testenv.ZooKeeper, open opener) {
	holder := client(t, open(t, "/ensemble"))
	held := mustLock(t, holder, "held")
	other := client(t, open(t, "/ensemble"))
	var last uint64
	grant := func(round int) {
		l := mustLock(t, other, "granting")
		if l.Token() <= last {
			t.Errorf("grant %d: token %d, want > %d", round, l.Token(), last)
		}
		last = l.Token()
		mustUnlock(t, l)
	}
	grant(0)
	leader := z.Leader()
	if leader == nil {
		t.Fatal("the ensemble has no leader")
	}
	leader.Kill()
	stopped := time.Now()
	for i := range 5 {
		grant(i + 1)
	}
	t.Logf("5 grants within %v of killing the leader (server %d)", time.Since(stopped).Round(time.Millisecond), leader.ID)
	select {
	case <-held.Done():
		t.Logf("the holder of another lock lost it during the election: %v", held.Err())
	default:
		if _, err := other.Mutex("held").TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryLock of a lock whose holder kept its lease: %v, want ErrNotAcquired", err)
		}
		mustUnlock(t, held)
	}
	leader.Start(t)
	grant(6)
}

// testLaggingFollower freezes a follower while the leader commits a release
// and then a grant, and asks a client connected only to that follower: a
// TryLock sent while the follower still lags must find the released lock
// free, and an Inspect must find the granted one held. A follower answers
// reads from its own state, so without a sync either may be stale.
func testLaggingFollower(t *testing.T, z *testenv.ZooKeeper) {
	leader := z.Leader()
	if leader == nil {
		t.Fatal("the ensemble has no leader")
	}
	var follower *testenv.ZooKeeperServer
	for _, s := range z.Servers {
		if s != leader && s.Mode() == "follower" {
			follower = s
			break
		}
	}
	if follower == nil {
		t.Fatal("the ensemble has no serving follower")
	}
	query := "session_timeout=" + testSession.String()
	holder := client(t, openURL(t, zkURL([]string{leader.Addr}, "/lag", query)))
	reader := client(t, openURL(t, zkURL([]string{follower.Addr}, "/lag", query)))
	ctx := testenv.Context(t, 60*time.Second)
	for round := range 5 {
		name := fmt.Sprintf("lag-%d", round)
		l := mustLock(t, holder, name)
		if _, err := reader.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("round %d: TryLock of a held lock through the follower: %v, want ErrNotAcquired", round, err)
		}
		follower.Pause()
		mustUnlock(t, l)
		held := mustLock(t, holder, name+"-held")
		tried, inspected := make(chan error, 1), make(chan error, 1)
		go func() {
			l2, err := reader.Mutex(name).TryLock(ctx)
			if err == nil {
				err = l2.Unlock(ctx)
			}
			tried <- err
		}()
		go func() {
			in, err := reader.Inspect(ctx, name+"-held")
			if err == nil && (!in.Held || in.Token != held.Token()) {
				err = fmt.Errorf("held=%v token=%d, want held with token %d", in.Held, in.Token, held.Token())
			}
			inspected <- err
		}()
		time.Sleep(200 * time.Millisecond) // both requests wait in the frozen follower's socket
		follower.Resume()
		if err := <-tried; err != nil {
			t.Errorf("round %d: TryLock through the follower after a release the leader committed: %v", round, err)
		}
		if err := <-inspected; err != nil {
			t.Errorf("round %d: Inspect through the follower of a lock the leader granted: %v", round, err)
		}
		mustUnlock(t, held)
	}
}

// testBreakOfReleasedLockIsNotHeld has the holder release its lock between
// Break's listing and Break's delete: nothing was broken, so Break must
// say the lock is free (ErrNotHeld), not report success; and the holder's
// release stays a clean one.
func testBreakOfReleasedLockIsNotHeld(t *testing.T, z *testenv.ZooKeeper, open opener) {
	holder, admin := client(t, open(t, "/break")), client(t, open(t, "/break"))
	name := "break-race"
	l := mustLock(t, holder, name)
	var unlockErr error
	testHookBeforeBreakDelete = func() {
		testHookBeforeBreakDelete = nil
		unlockErr = l.Unlock(testenv.Context(t, 30*time.Second))
	}
	defer func() { testHookBeforeBreakDelete = nil }()
	err := admin.Break(testenv.Context(t, 30*time.Second), name)
	if unlockErr != nil {
		t.Fatalf("Unlock between Break's listing and its delete: %v", unlockErr)
	}
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Break of a lock released before its delete: %v, want ErrNotHeld", err)
	}
	// With a new holder in place by the time of the delete, Break breaks
	// that one.
	l1 := mustLock(t, holder, name)
	other := client(t, open(t, "/break"))
	var l2 *dlock.Lease
	testHookBeforeBreakDelete = func() {
		testHookBeforeBreakDelete = nil
		if unlockErr = l1.Unlock(testenv.Context(t, 30*time.Second)); unlockErr == nil {
			l2, unlockErr = other.Mutex(name).Lock(testenv.Context(t, 30*time.Second))
		}
	}
	if err := admin.Break(testenv.Context(t, 30*time.Second), name); err != nil {
		t.Errorf("Break of a lock handed over before its delete: %v, want nil", err)
	}
	if unlockErr != nil {
		t.Fatalf("hand-over between Break's listing and its delete: %v", unlockErr)
	}
	select {
	case <-l2.Done():
	case <-time.After(30 * time.Second):
		t.Error("the new holder's Done not closed 30s after Break")
	}
}

// testReleaseAfterSessionExpired cuts a holder off until the server has
// expired its session and granted the lock to another client, with the
// lease deadline out of the way (the driver is told the session lasts an
// hour) and no watch on the node yet; the holder's Release, sent while it
// is cut off, meets the expired session when the connection comes back. It
// must report the lease lost, not a clean release.
func testReleaseAfterSessionExpired(t *testing.T, z *testenv.ZooKeeper, open opener) {
	p := testenv.NewProxy(t, z.Servers[0].Addr)
	d := hourLeaseDriver(t, p.Addr())
	name := "release-expired"
	owner := strings.Repeat("r", 32)
	g, err := d.Acquire(testenv.Context(t, 30*time.Second), driver.Request{Name: name, Owner: owner, TTL: time.Hour, Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	held := driver.Held{Name: name, Owner: owner, Token: g.Token, Handle: g.Handle}
	p.Block()
	other := client(t, open(t, "/faults"))
	l2 := mustLock(t, other, name) // granted once the server expired the session
	released := make(chan error, 1)
	go func() { released <- d.Release(testenv.Context(t, 60*time.Second), held) }()
	time.Sleep(100 * time.Millisecond) // the delete waits in the blocked proxy
	p.Unblock()
	if err := <-released; !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Release whose session expired: %v, want ErrLeaseLost", err)
	}
	if _, err := other.Mutex(name).TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("the new holder's lock must still be held; TryLock: %v", err)
	}
	mustUnlock(t, l2)
}

// TestFollowerCutFromLeaderLosesLeaseBeforeNextGrant cuts off, from the
// two other servers of an ensemble, the follower that the holder of a lock
// talks to, while the holder still reaches it. The leader stops hearing of
// the holder's session and expires it a session timeout later, and grants
// the lock to a client on the majority's side; the cut follower still
// answers its clients from its stale state until it gives the leader up,
// syncLimit ticks after the cut — here longer than the session timeout. The
// holder's Done must close before the majority sees the holder's node go,
// hence before the new grant.
func TestFollowerCutFromLeaderLosesLeaseBeforeNextGrant(t *testing.T) {
	// syncLimit × tick = 6s, more than testSession.
	z := testenv.StartZooKeeperEnsemble(t, 3, testenv.ZooKeeperOptions{SyncLimit: 30, PeerProxies: true})
	leader := z.Leader()
	if leader == nil {
		t.Fatal("the ensemble has no leader")
	}
	var follower *testenv.ZooKeeperServer
	var majority []string
	for _, s := range z.Servers {
		if follower == nil && s != leader && s.Mode() == "follower" {
			follower = s
			continue
		}
		majority = append(majority, s.Addr)
	}
	if follower == nil {
		t.Fatal("the ensemble has no serving follower")
	}
	query := "session_timeout=" + testSession.String()
	holder := client(t, openURL(t, zkURL([]string{follower.Addr}, "/cut", query)))
	other := openURL(t, zkURL(majority, "/cut", query))
	name := "cut"
	l := mustLock(t, holder, name)

	// The majority's view: a watch on the holder's node, and a waiter.
	parent := other.lockPath(name)
	kids, _, err := other.Conn().Children(parent)
	if err != nil || len(kids) != 1 {
		t.Fatalf("children of %s: %v, %v", parent, kids, err)
	}
	ok, _, watch, err := other.Conn().ExistsW(parent + "/" + kids[0])
	if err != nil || !ok {
		t.Fatalf("watch on the holder's node: %v, %v", ok, err)
	}
	type grant struct {
		l   *dlock.Lease
		err error
		at  time.Time
	}
	granted := make(chan grant, 1)
	go func() {
		l2, err := client(t, other).Mutex(name).Lock(testenv.Context(t, 60*time.Second))
		granted <- grant{l2, err, time.Now()}
	}()
	testenv.Eventually(t, 30*time.Second, "the majority's waiter to queue", func() error {
		in, err := client(t, other).Inspect(testenv.Context(t, 30*time.Second), name)
		if err == nil && len(in.Waiters) != 1 {
			err = fmt.Errorf("%d waiters", len(in.Waiters))
		}
		return err
	})

	follower.Isolate(t)
	defer follower.Rejoin()
	cut := time.Now()
	var lost, deleted time.Time
	var g grant
	done, deletedW := l.Done(), watch
	timeout := time.After(45 * time.Second)
	for lost.IsZero() || deleted.IsZero() || g.at.IsZero() {
		select {
		case <-done:
			lost, done = time.Now(), nil
		case ev := <-deletedW:
			if ev.Type != zk.EventNodeDeleted {
				t.Fatalf("watch on the holder's node: %+v, want its deletion", ev)
			}
			deleted, deletedW = time.Now(), nil
		case g = <-granted:
			if g.err != nil {
				t.Fatalf("the majority's Lock: %v", g.err)
			}
		case <-timeout:
			t.Fatalf("45s after the cut: Done closed %v, node deleted %v, granted %v", !lost.IsZero(), !deleted.IsZero(), !g.at.IsZero())
		}
	}
	t.Logf("after the cut: Done closed at %v, the majority saw the node go at %v and was granted at %v",
		lost.Sub(cut).Round(time.Millisecond), deleted.Sub(cut).Round(time.Millisecond), g.at.Sub(cut).Round(time.Millisecond))
	if !lost.Before(deleted) || !lost.Before(g.at) {
		t.Errorf("the holder's Done closed after the leader expired its session and granted the lock to another client: two holders")
	}
	if g.l.Token() <= l.Token() {
		t.Errorf("token of the majority's grant %d, want > %d", g.l.Token(), l.Token())
	}
	mustUnlock(t, g.l)
}
