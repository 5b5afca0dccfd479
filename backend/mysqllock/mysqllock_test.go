package mysqllock

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

func TestMain(m *testing.M) { dlocktest.Main(m) }

// server is the MariaDB of one top-level test, shared by its subtests.
type server struct {
	*testenv.MariaDB
}

func (s server) url(addr string) string {
	return s.URL(testenv.MariaDBUser, testenv.MariaDBPassword, addr)
}

// open returns a driver with its own pool, at addr (the server or a proxy),
// closed when t ends.
func (s server) open(t testing.TB, addr string, query string) *Driver {
	t.Helper()
	u, err := url.Parse(s.url(addr) + query)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := openURL(ctx, u)
	if err != nil {
		t.Fatalf("open %s: %v", dlock.Redact(u.String()), err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d.(*Driver)
}

func (s server) client(t testing.TB, opts ...dlock.Option) *dlock.Client {
	return dlock.New(s.open(t, s.Addr, ""), opts...)
}

// sqlDB is a plain pool on the test database, for looking at the table.
func (s server) sqlDB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", s.DSN(testenv.MariaDBUser, testenv.MariaDBPassword))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// harness runs the conformance suite against s with the URL query query.
func (s server) harness(query string) dlocktest.Harness {
	return dlocktest.Harness{
		Open: func(ctx context.Context, addrs []string) (driver.Driver, error) {
			addr := s.Addr
			if addrs != nil {
				addr = addrs[0]
			}
			u, err := url.Parse(s.url(addr) + query)
			if err != nil {
				return nil, err
			}
			return openURL(ctx, u)
		},
		Endpoints: []string{s.Addr},
		URL:       s.url(s.Addr) + query,
		Restart:   s.Restart,
	}
}

// TestOnMariaDBServer starts one server and runs every test against it: starting
// MariaDB takes seconds, and the restart tests need it to themselves.
func TestOnMariaDBServer(t *testing.T) {
	// TLS is offered under a certificate for "localhost" alone, which a
	// client verifies only if it checks the host it was given. Snapshot
	// isolation is on, as MariaDB 11.6.2 and later have it by default: a
	// statement that runs with it would fail under contention (see
	// snapshot.go); the other tests' servers have it off, 10.11's default.
	s := server{testenv.StartMariaDBTLSWith(t, []string{"localhost"}, "--innodb-snapshot-isolation=ON")}
	var on bool
	if err := s.sqlDB(t).QueryRow("SELECT @@GLOBAL.innodb_snapshot_isolation").Scan(&on); err != nil || !on {
		t.Fatalf("the server's innodb_snapshot_isolation: %v, %v; want on", on, err)
	}

	s.runConformance(t)
	t.Run("FairTryLockDoesNotPassAQueuedWaiter", s.testFairTryLockDoesNotPassAQueuedWaiter)
	t.Run("FairQueueSkipsAWaiterThatLeft", s.testFairQueueSkipsAWaiterThatLeft)
	t.Run("FairWaiterKeepsItsPlace", s.testFairWaiterKeepsItsPlace)
	t.Run("FairReleaseWakesOnlyTheNextWaiter", s.testFairReleaseWakesOnlyTheNextWaiter)
	t.Run("FairCancelledWaiterLeavesBeforeLockReturns", s.testFairCancelledWaiterLeavesBeforeLockReturns)
	t.Run("FairHandOffDropsTheBellInTheRelease", s.testFairHandOffDropsTheBellInTheRelease)
	t.Run("FairReleaseBeforeTheBellKeepsTheOrder", s.testFairReleaseBeforeTheBellKeepsTheOrder)
	t.Run("FairWaiterGrantedByItsOwnAttemptLeavesTheQueue", s.testFairWaiterGrantedByItsOwnAttemptLeavesTheQueue)
	t.Run("HostileNamesAreStoredAndMatchedExactly", s.testHostileNames)
	t.Run("TableNameIsQuoted", s.testTableName)
	t.Run("UserWithoutCreateGetsGrantAdvice", s.testNoCreatePrivilege)
	t.Run("CancelledWaiterLeavesNoSessionWaiting", s.testCancelledWaiter)
	t.Run("WaiterIsWokenByRelease", s.testWokenByRelease)
	t.Run("ReleaserStandsBackForAWaiter", s.testReleaserStandsBack)
	t.Run("CancelledWaiterGivesItsSlotBack", s.testCancelledWaiterGivesSlotBack)
	t.Run("GrantWithWaitersTakesItsBellAtOnce", s.testGrantWithWaitersTakesBellAtOnce)
	t.Run("HeldLockTakesItsBellSoon", s.testHeldLockTakesBellSoon)
	t.Run("QuietBellsAreBounded", s.testQuietBellsAreBounded)
	t.Run("WaitedGrantTakesItsBellPastTheQuietBound", s.testWaitedGrantTakesBellPastTheQuietBound)
	t.Run("ReleaseAndHolderDeathRingTheBell", s.testBellRings)
	t.Run("BellIsKeptWhileLeaseIsRenewed", s.testBellKept)
	t.Run("CutConnectionsReconnectAndKeepLease", s.testCutKeepsLease)
	t.Run("UnreachableServerEndsLeaseBeforeOthersAcquire", s.testUnreachable)
	t.Run("FrozenServerEndsLeaseBeforeOthersAcquire", s.testFrozenServer)
	t.Run("FrozenServerIsUnavailableNotAHang", s.testFrozenUnavailable)
	t.Run("CrashWhileHeldKeepsTokensAndGrantsDueLeases", s.testCrashWhileHeld)
	t.Run("URLParameters", s.testURL)
	t.Run("TLSVerifiesTheHostOfTheURL", s.testTLSHost)
	t.Run("SemaphoreWaiterWakesByThePermitsBell", s.testPermitBell)
	t.Run("SemaphoreOnTableMigratedBeforeSemaphores", s.testPermitsOnOldTable)
	t.Run("SemaphoreReleaseOfAnotherPermitIsSeenAtTheNextLook", s.testPermitReleasedUnwatched)
}

// runConformance runs the conformance suite on s, then the whole suite
// again with fair waiting (dlock.WithFair): every Lock queues and never
// passes a live waiter.
func (s server) runConformance(t *testing.T) {
	t.Run("Conformance", func(t *testing.T) { dlocktest.Run(t, s.harness("")) })
	t.Run("ConformanceFair", func(t *testing.T) {
		h := s.harness("?table=fair_leases")
		h.Fair = true
		dlocktest.Run(t, h)
	})
}

// TestOnOtherIsolationLevels: the statements rely on InnoDB's locking
// reads, which act on a row's newest committed version whatever the
// transaction's isolation level (snapshot.go). The conformance suite in
// both modes, and the fair and waiting tests, run again on a server whose
// sessions default to READ COMMITTED, and on one whose sessions default
// to SERIALIZABLE (where InnoDB makes the plain reads of a transaction
// locking reads too); TestOnMariaDBServer's server has the default,
// REPEATABLE READ.
func TestOnOtherIsolationLevels(t *testing.T) {
	for _, level := range []string{"READ-COMMITTED", "SERIALIZABLE"} {
		t.Run(level, func(t *testing.T) {
			s := server{testenv.StartMariaDBWith(t, "--transaction-isolation="+level)}
			var got string
			if err := s.sqlDB(t).QueryRow("SELECT @@GLOBAL.tx_isolation").Scan(&got); err != nil || got != level {
				t.Fatalf("the server's isolation level: %q, %v; want %s", got, err, level)
			}
			s.runConformance(t)
			t.Run("FairTryLockDoesNotPassAQueuedWaiter", s.testFairTryLockDoesNotPassAQueuedWaiter)
			t.Run("FairWaiterKeepsItsPlace", s.testFairWaiterKeepsItsPlace)
			t.Run("FairHandOffDropsTheBellInTheRelease", s.testFairHandOffDropsTheBellInTheRelease)
			t.Run("FairReleaseBeforeTheBellKeepsTheOrder", s.testFairReleaseBeforeTheBellKeepsTheOrder)
			t.Run("WaiterIsWokenByRelease", s.testWokenByRelease)
			t.Run("ReleaserStandsBackForAWaiter", s.testReleaserStandsBack)
			t.Run("SemaphoreWaiterWakesByThePermitsBell", s.testPermitBell)
		})
	}
}

func (s server) testHostileNames(t *testing.T) {
	c := s.client(t, dlock.WithTTL(10*time.Second))
	db := s.sqlDB(t)
	prefix := "hostile/" + t.Name() + "/"
	names := []string{
		"it's", `say "hi"`, "back`tick", `back\slash`, "nul\x00inside", "nul\x00", "nul",
		"'; DROP TABLE dlock_leases; --", "x' OR '1'='1", "%", "_", "a%b", "trailing ", "trailing",
		"ключ/名前/🔒", "\t\n\r",
	}
	long := prefix + strings.Repeat("é", (dlock.MaxNameLen-len(prefix))/2)
	long += strings.Repeat("x", dlock.MaxNameLen-len(long))
	var full []string
	for _, n := range names {
		full = append(full, prefix+n)
	}
	full = append(full, long)
	if len(long) != dlock.MaxNameLen {
		t.Fatalf("long name is %d bytes", len(long))
	}
	leases := map[string]*dlock.Lease{}
	for _, n := range full {
		l, err := c.Mutex(n).TryLock(testenv.Context(t, 30*time.Second))
		if err != nil {
			t.Fatalf("TryLock(%q): %v", n, err)
		}
		leases[n] = l
	}
	// Each name is a row of its own, stored byte for byte.
	for _, n := range full {
		var got []byte
		if err := db.QueryRow("SELECT name FROM dlock_leases WHERE name = ?", []byte(n)).Scan(&got); err != nil {
			t.Fatalf("row of %q: %v", n, err)
		}
		if !bytes.Equal(got, []byte(n)) {
			t.Errorf("stored name %q, want %q", got, n)
		}
		in, err := c.Inspect(testenv.Context(t, 10*time.Second), n)
		if err != nil || !in.Held || in.Token != leases[n].Token() {
			t.Errorf("Inspect(%q) = %+v, %v; want held with token %d", n, in, err, leases[n].Token())
		}
	}
	var rows int
	if err := db.QueryRow("SELECT COUNT(*) FROM dlock_leases WHERE name LIKE CONCAT(?, '%')", prefix).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != len(full) {
		t.Errorf("%d rows under the prefix, want %d", rows, len(full))
	}
	// A prefix with LIKE's wildcards matches itself only.
	for _, p := range []string{prefix + "%", prefix + "_", prefix + "nul\x00"} {
		got, err := c.List(testenv.Context(t, 10*time.Second), p)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, n := range full {
			if strings.HasPrefix(n, p) {
				want = append(want, n)
			}
		}
		sort.Strings(want)
		var gotNames []string
		for _, in := range got {
			gotNames = append(gotNames, in.Name)
		}
		if strings.Join(gotNames, "|") != strings.Join(want, "|") {
			t.Errorf("List(%q) = %q, want %q", p, gotNames, want)
		}
	}
	// Releasing one name leaves its neighbours held.
	if err := leases[prefix+"nul"].Unlock(testenv.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{prefix + "nul\x00", prefix + "nul\x00inside"} {
		if _, err := c.Mutex(n).TryLock(testenv.Context(t, 10*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryLock(%q) after releasing its neighbour: %v, want ErrNotAcquired", n, err)
		}
	}
	for n, l := range leases {
		if n != prefix+"nul" {
			if err := l.Unlock(testenv.Context(t, 10*time.Second)); err != nil {
				t.Errorf("Unlock(%q): %v", n, err)
			}
		}
	}
}

func (s server) testTableName(t *testing.T) {
	table := "odd `name'; --"
	d := s.open(t, s.Addr, "?table="+url.QueryEscape(table))
	c := dlock.New(d)
	l, err := c.Mutex("x").TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.sqlDB(t).QueryRow("SELECT COUNT(*) FROM `odd ``name'; --` WHERE name = 'x'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("row in the quoted table: %d, %v", n, err)
	}
	if err := l.Unlock(testenv.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := New(s.sqlDB(t), WithTable("")); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("WithTable(\"\"): %v, want ErrInvalidOption", err)
	}
	if _, err := New(nil); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("New(nil): %v, want ErrInvalidOption", err)
	}
}

func (s server) testNoCreatePrivilege(t *testing.T) {
	u, err := url.Parse(s.URL(testenv.MariaDBLimitedUser, testenv.MariaDBLimitedPassword, s.Addr) + "?table=limited_leases")
	if err != nil {
		t.Fatal(err)
	}
	d, err := openURL(testenv.Context(t, 30*time.Second), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	c := dlock.New(d)
	_, err = c.Mutex("x").TryLock(testenv.Context(t, 30*time.Second))
	if err == nil || !strings.Contains(err.Error(), "GRANT CREATE, SELECT, INSERT, UPDATE, DELETE ON `dlock`.* TO 'dlock_limited'") || !strings.Contains(err.Error(), "CREATE TABLE") {
		t.Fatalf("TryLock without CREATE privilege: %v; want advice to GRANT CREATE or run the CREATE TABLE", err)
	}
	// The driver's own error is classified, and names the table and the
	// missing privilege.
	_, _, err = d.(*Driver).TryAcquire(testenv.Context(t, 30*time.Second), driver.Request{Name: "x", Owner: "o", TTL: time.Minute})
	if !errors.Is(err, driver.ErrUnavailable) || !strings.Contains(err.Error(), "limited_leases") || !strings.Contains(err.Error(), "CREATE privilege") {
		t.Fatalf("TryAcquire without CREATE privilege: %v; want ErrUnavailable naming the table and the CREATE privilege", err)
	}
	t.Logf("error: %v", err)
	// Once a privileged user has migrated, the limited user can lock.
	admin := s.open(t, s.Addr, "?table=limited_leases")
	if err := admin.Migrate(testenv.Context(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	l, err := c.Mutex("x").TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatalf("TryLock after Migrate: %v", err)
	}
	if err := l.Unlock(testenv.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// waitingSessions counts the sessions of the test user blocked in GET_LOCK.
func waitingSessions(t testing.TB, db *sql.DB) int {
	t.Helper()
	var n int
	err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%GET_LOCK%' AND STATE LIKE '%lock%' AND ID <> CONNECTION_ID()").Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (s server) testCancelledWaiter(t *testing.T) {
	db := s.sqlDB(t)
	holder := s.client(t, dlock.WithTTL(30*time.Second))
	l, err := holder.Mutex("cancel").TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	waiter := s.client(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Mutex("cancel").Lock(ctx)
		done <- err
	}()
	// The waiter blocks in GET_LOCK on the server.
	waitInGetLock(t, db, "the waiter")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v", err)
	}
	// Lock returned only after its wait ended on the server.
	if n := waitingSessions(t, db); n != 0 {
		t.Errorf("%d sessions still wait in GET_LOCK after the Lock was cancelled", n)
	}
}

// testWokenByRelease: a waiter blocked in GET_LOCK on the holder's bell
// returns with the lock after the holder releases, although the holder's
// lease had a long time to run and the waiter's fallback poll is long.
func (s server) testWokenByRelease(t *testing.T) {
	db := s.sqlDB(t)
	holder := s.client(t, dlock.WithTTL(60*time.Second))
	waiter := s.client(t, dlock.WithTTL(60*time.Second))
	l, err := holder.Mutex("woken").TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		l2, err := waiter.Mutex("woken").Lock(testenv.Context(t, 60*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	waitInGetLock(t, db, "the waiter")
	select {
	case <-got:
		t.Fatal("the waiter got the lock while it was held")
	default:
	}
	released := time.Now()
	if err := l.Unlock(testenv.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	l2 := <-got
	if l2 == nil {
		return
	}
	t.Logf("granted %v after the release", time.Since(released).Round(time.Microsecond))
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after %d", l2.Token(), l.Token())
	}
	_ = l2.Unlock(testenv.Context(t, 10*time.Second))
}

// testCutKeepsLease resets the holder's connections: the pool reconnects
// and the lease is renewed; nobody else can take it meanwhile.
func (s server) testCutKeepsLease(t *testing.T) {
	p := testenv.NewProxy(t, s.Addr)
	ttl := 2 * time.Second
	holder := dlock.New(s.open(t, p.Addr(), ""), dlock.WithTTL(ttl))
	other := s.client(t)
	l, err := holder.Mutex("cut").TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		p.Cut()
		time.Sleep(ttl / 2)
		if _, err := other.Mutex("cut").TryLock(testenv.Context(t, 10*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock by another client while the holder's lease is live: %v (holder's lease: %v)", err, l.Err())
		}
	}
	select {
	case <-l.Done():
		t.Fatalf("lease lost after connection resets: %v", l.Err())
	default:
	}
	if err := l.Unlock(testenv.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// testUnreachable cuts the holder's connections and refuses new ones: its
// Done closes before another client can acquire.
func (s server) testUnreachable(t *testing.T) {
	p := testenv.NewProxy(t, s.Addr)
	ttl := 2 * time.Second
	holder := dlock.New(s.open(t, p.Addr(), "?timeout=1s"), dlock.WithTTL(ttl))
	other := s.client(t)
	l, err := holder.Mutex("unreachable").TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	ctx := testenv.Context(t, 60*time.Second)
	var l2 *dlock.Lease
	for l2 == nil {
		l2, err = other.Mutex("unreachable").TryLock(ctx)
		if err != nil && !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatal(err)
		}
		if l2 == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("another client acquired while the cut-off holder still believed it held the lock")
	}
	if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
		t.Errorf("Err = %v, want ErrLeaseLost", l.Err())
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after %d", l2.Token(), l.Token())
	}
	_ = l2.Unlock(testenv.Context(t, 10*time.Second))
}

// testCrashWhileHeld kills the server with SIGKILL while one lease is live
// and another is due, and starts it again.
func (s server) testCrashWhileHeld(t *testing.T) {
	live := s.client(t, dlock.WithTTL(20*time.Second))
	l, err := live.Mutex("crash/live").TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// A lease that nobody renews: due by the time the server is back.
	d := s.open(t, s.Addr, "")
	g, _, err := d.TryAcquire(testenv.Context(t, 30*time.Second), driver.Request{Name: "crash/due", Owner: strings.Repeat("ab", 16), TTL: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s.Crash(t)

	c := s.client(t)
	ctx := testenv.Context(t, 60*time.Second)
	var due *dlock.Lease
	for due == nil {
		due, err = c.Mutex("crash/due").TryLock(ctx)
		if err != nil && ctx.Err() != nil {
			t.Fatalf("the due lease was not granted anew after the restart: %v", err)
		}
		if err != nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if due.Token() <= g.Token {
		t.Errorf("token after restart %d, want > %d", due.Token(), g.Token)
	}
	// The live lease is still its holder's: nobody else gets it.
	_, err = c.Mutex("crash/live").TryLock(testenv.Context(t, 30*time.Second))
	select {
	case <-l.Done():
		t.Logf("the live lease ended during the restart (%v); TryLock: %v", l.Err(), err)
	default:
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock of a live lease after the restart: %v, want ErrNotAcquired", err)
		}
		if err := l.Unlock(testenv.Context(t, 30*time.Second)); err != nil {
			t.Fatalf("Unlock of the live lease after the restart: %v", err)
		}
	}
	l2, err := c.Mutex("crash/live").Lock(testenv.Context(t, 60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token after restart %d, want > %d", l2.Token(), l.Token())
	}
	_ = l2.Unlock(testenv.Context(t, 10*time.Second))
	_ = due.Unlock(testenv.Context(t, 10*time.Second))
}

func (s server) testURL(t *testing.T) {
	for _, bad := range []string{
		"mysql://u:secret@127.0.0.1:1/db?table=",
		"mysql://u:secret@127.0.0.1:1/db/extra",
		"mysql://u:secret@127.0.0.1:1/db?tls=nonsense",
		"mysql://u:secret@127.0.0.1:1/db?op_timeout=0s",
	} {
		_, err := dlock.Open(testenv.Context(t, 10*time.Second), bad)
		if err == nil {
			t.Errorf("Open(%q) succeeded", bad)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open error shows the password: %v", err)
		}
	}
	_, err := dlock.Open(testenv.Context(t, 10*time.Second), "mariadb://u:secret@127.0.0.1:1/db")
	if !errors.Is(err, dlock.ErrUnavailable) || strings.Contains(err.Error(), "secret") {
		t.Errorf("Open of an unreachable server: %v; want ErrUnavailable without the password", err)
	}
	c, err := dlock.Open(testenv.Context(t, 30*time.Second), s.url(s.Addr)+"?tls=false&readTimeout=30s")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Mutex("url").TryLock(testenv.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Unlock(testenv.Context(t, 10*time.Second))
}

// bellHeld reports whether the holder recorded in name's row holds its
// bell.
func bellHeld(t testing.TB, db *sql.DB, name string) bool {
	t.Helper()
	var ok sql.NullBool
	err := db.QueryRow("SELECT IS_USED_LOCK(?) = bell FROM dlock_leases WHERE name = ?", bellName(DefaultTable, name), name).Scan(&ok)
	if err != nil {
		t.Fatal(err)
	}
	return ok.Valid && ok.Bool
}

// waitBellHeld waits until the holder of name has taken its bell.
func waitBellHeld(t testing.TB, db *sql.DB, name string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "the holder to take its bell", func() error {
		if !bellHeld(t, db, name) {
			return errors.New("not taken")
		}
		return nil
	})
}

// waitInGetLock waits until who (a waiter) blocks in GET_LOCK.
func waitInGetLock(t testing.TB, db *sql.DB, who string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, who+" to wait in GET_LOCK", func() error {
		if waitingSessions(t, db) == 0 {
			return errors.New("no session waits")
		}
		return nil
	})
}

// testBellKept: a lease renewed for several TTLs keeps its bell, and loses
// it at release.
func (s server) testBellKept(t *testing.T) {
	db := s.sqlDB(t)
	ttl := time.Second
	c := s.client(t, dlock.WithTTL(ttl))
	l, err := c.Mutex("kept").TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waitBellHeld(t, db, "kept")
	time.Sleep(3 * ttl)
	select {
	case <-l.Done():
		t.Fatalf("lease lost: %v", l.Err())
	default:
	}
	if !bellHeld(t, db, "kept") {
		t.Fatal("the bell was dropped while the lease was renewed")
	}
	if err := l.Unlock(testenv.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the bell to be given up after the release", func() error {
		var used sql.NullInt64
		if err := db.QueryRow("SELECT IS_USED_LOCK(?)", bellName(DefaultTable, "kept")).Scan(&used); err != nil {
			t.Fatal(err)
		}
		if used.Valid {
			return fmt.Errorf("held by connection %d", used.Int64)
		}
		return nil
	})
}

// testBellRings runs a waiter's wait statement by hand against a holder
// whose lease has a minute to run: the statement returns "rang" (3) when
// the holder releases, and again when the holder's process goes away
// without releasing; only a timeout would return "held" (2).
func (s server) testBellRings(t *testing.T) {
	db := s.sqlDB(t)
	for _, end := range []string{"release", "close"} {
		t.Run(end, func(t *testing.T) {
			d := s.open(t, s.Addr, "")
			name := "bell/" + end
			owner := strings.Repeat("cd", 16)
			g, _, err := d.TryAcquire(testenv.Context(t, 30*time.Second), driver.Request{Name: name, Owner: owner, TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			bell := bellName(d.table, name)
			waitBellHeld(t, db, name) // taken in the background
			res := make(chan sql.NullInt64, 1)
			go func() {
				var slot, st sql.NullInt64
				w := &waiter{name: name, bell: bell, slots: waitingPrefix(d.table, name), slot: -1}
				args := w.waitArgs(nil)
				args[len(args)-4] = 30 // the cap, in seconds
				if err := db.QueryRow(d.q.wait, args...).Scan(&slot, &st); err != nil {
					t.Error(err)
				}
				res <- st
			}()
			waitInGetLock(t, db, "the wait statement")
			select {
			case st := <-res:
				t.Fatalf("the wait returned %v while the lock was held", st)
			default:
			}
			if end == "release" {
				if err := d.Release(testenv.Context(t, 10*time.Second), driver.Held{Name: name, Owner: owner, Token: g.Token}); err != nil {
					t.Fatal(err)
				}
			} else {
				_ = d.Close()
			}
			if st := <-res; !st.Valid || st.Int64 != waitRang {
				t.Errorf("wait statement after %s: %v, want %d (rang)", end, st, waitRang)
			}
		})
	}
}

// TestBellNamesFitGetLockAndAreSafeLiterals: the bell keeper writes bell
// names into its statements as literals, and GET_LOCK takes at most 64
// characters.
func TestBellNamesFitGetLockAndAreSafeLiterals(t *testing.T) {
	seen := map[string]string{}
	for _, n := range []string{"a", "a\x00", "'", "`", strings.Repeat("é", 512), "x' OR 1=1 --"} {
		for _, table := range []string{DefaultTable, "other"} {
			b := bellName(table, n)
			if len(b) > 64 || !strings.HasPrefix(b, "dlock:") || strings.Trim(b[len("dlock:"):], "0123456789abcdef") != "" {
				t.Errorf("bellName(%q, %q) = %q: want at most 64 of [a-z0-9:]", table, n, b)
			}
			// The waiting slots: the prefix and one digit.
			p := waitingPrefix(table, n) + "9"
			if len(p) > 64 || !strings.HasPrefix(p, "dlock:w") || strings.Trim(p[len("dlock:w"):], "0123456789abcdef") != "" {
				t.Errorf("waitingPrefix(%q, %q) = %q: want at most 63 of [a-z0-9:]", table, n, p)
			}
			if prev, dup := seen[b]; dup {
				t.Errorf("bellName collision: %q and %q", prev, table+"/"+n)
			}
			seen[b] = table + "/" + n
		}
	}
}

// testFrozenServer stops the server (SIGSTOP) for longer than a lease:
// the holder's Done closes meanwhile, and after the server thaws the lock
// is granted to another client with a higher token.
func (s server) testFrozenServer(t *testing.T) {
	ttl := 2 * time.Second
	holder := dlock.New(s.open(t, s.Addr, "?timeout=1s"), dlock.WithTTL(ttl))
	other := s.client(t)
	l, err := holder.Mutex("frozen").TryLock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s.Pause()
	defer s.Resume()
	select {
	case <-l.Done():
	case <-time.After(ttl + 30*time.Second):
		t.Fatal("the holder's Done did not close while the server was frozen")
	}
	s.Resume()
	if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
		t.Errorf("Err = %v, want ErrLeaseLost", l.Err())
	}
	// The server's clock went on: the lease is due (or soon is).
	l2, err := other.Mutex("frozen").Lock(testenv.Context(t, 60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after %d", l2.Token(), l.Token())
	}
	_ = l2.Unlock(testenv.Context(t, 10*time.Second))
}

// testTLSHost connects with TLS to "localhost", whose name alone the
// server's certificate carries, through a registered configuration that
// trusts the test CA and names no ServerName: the certificate is verified
// against the URL's host and accepted, and the session is encrypted. The
// same configuration at 127.0.0.1 is refused (the certificate has no IP
// address): verification is real, and follows the host dialled.
func (s server) testTLSHost(t *testing.T) {
	pem, err := os.ReadFile(s.TLS.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatal("no CA certificate in " + s.TLS.CA)
	}
	if err := mysql.RegisterTLSConfig("dlock-test-ca", &tls.Config{RootCAs: roots}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mysql.DeregisterTLSConfig("dlock-test-ca") })

	byName := s.open(t, "localhost:"+strconv.Itoa(s.Port), "?tls=dlock-test-ca")
	var name, cipher string
	if err := byName.db.QueryRowContext(testenv.Context(t, 10*time.Second), "SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher); err != nil {
		t.Fatal(err)
	}
	if cipher == "" {
		t.Fatal("the session to localhost with tls=dlock-test-ca is not encrypted")
	}
	l, err := dlock.New(byName).Mutex("tls").TryLock(testenv.Context(t, 10*time.Second))
	if err != nil {
		t.Fatalf("TryLock over TLS: %v", err)
	}
	_ = l.Unlock(testenv.Context(t, 10*time.Second))

	u, err := url.Parse(s.url(s.Addr) + "?tls=dlock-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	if d, err := openURL(testenv.Context(t, 10*time.Second), u); err == nil {
		d.Close()
		t.Fatal("TLS to 127.0.0.1 accepted a certificate for localhost alone")
	} else if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("TLS to 127.0.0.1: %v; want a certificate verification error", err)
	}
}

// TestTLSServerNameIsTheURLHost: tls=true verifies the certificate against
// the host of the URL, not against the address the DSN parser assumes when
// it has none (127.0.0.1).
func TestTLSServerNameIsTheURLHost(t *testing.T) {
	for raw, want := range map[string]string{
		"mysql://u:p@db.example:3306/app?tls=true": "db.example",
		"mysql://u:p@db.example/app?tls=true":      "db.example",
		"mariadb://u:p@[::1]:3307/app?tls=true":    "::1",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		cfg, _, err := configFromURL(context.Background(), u)
		if err != nil {
			t.Fatalf("%s: %v", dlock.Redact(raw), err)
		}
		if cfg.TLS == nil || cfg.TLS.InsecureSkipVerify {
			t.Fatalf("%s: TLS config %v, want one that verifies", dlock.Redact(raw), cfg.TLS)
		}
		if cfg.TLS.ServerName != want {
			t.Errorf("%s: the certificate is verified against %q, want %q", dlock.Redact(raw), cfg.TLS.ServerName, want)
		}
	}
}

// testFrozenUnavailable freezes the server (SIGSTOP) while a lock is held
// and waited for. With the caller's context live and an operation timeout
// of one second, every call — TryLock, Lock, a Lock already waiting,
// Inspect, Unlock, and the driver's Acquire — returns an error wrapping ErrUnavailable (not a bare
// context.DeadlineExceeded, and not a hang until the caller's context
// ends). Once the server thaws, locking works again.
func (s server) testFrozenUnavailable(t *testing.T) {
	ctx := testenv.Context(t, 120*time.Second)
	d := s.open(t, s.Addr, "?op_timeout=1s")
	// No renewal falls due during the test.
	c := dlock.New(d, dlock.WithTTL(10*time.Minute))
	l, err := c.Mutex("frozen/held").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := c.Mutex("frozen/held").Lock(ctx)
		waiting <- err
	}()
	s.Pause()
	defer s.Resume()
	_, err = c.Mutex("frozen/other").TryLock(ctx)
	testenv.WantUnavailable(t, ctx, "TryLock", err)
	_, err = c.Mutex("frozen/other").Lock(ctx)
	testenv.WantUnavailable(t, ctx, "Lock", err)
	_, err = c.Inspect(ctx, "frozen/held")
	testenv.WantUnavailable(t, ctx, "Inspect", err)
	_, err = d.Acquire(ctx, driver.Request{Name: "frozen/other", Owner: "o", TTL: time.Minute})
	testenv.WantUnavailable(t, ctx, "driver Acquire", err)
	testenv.WantUnavailable(t, ctx, "Unlock", l.Unlock(ctx))
	testenv.WantUnavailable(t, ctx, "a waiting Lock", <-waiting)
	s.Resume()
	for range 50 { // the pool replaces the connections the timeouts closed
		var l *dlock.Lease
		if l, err = c.Mutex("frozen/after").TryLock(ctx); err == nil {
			_ = l.Unlock(ctx)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("TryLock after the server thawed: %v", err)
	}
}
