package zklock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/internal/testenv"
)

// The tests here run dlock in compat=kazoo beside kazoo's Lock (Debian's
// python3-kazoo, run by testenv.Python), and in compat=curator beside
// Curator's InterProcessMutex (Debian's libcurator-recipes-java, in a
// small Java program compiled at test time), on one lock path.

// compatSession is the session timeout of every client of these tests,
// dlock's and the foreign ones: a killed holder's lock frees within it.
const compatSession = 2 * time.Second

func init() { dlocktest.Worker("compat", compatWorker) }

// compatWorker (args: URL name counter log n window) is a dlock worker of
// the fleet (dlocktest.CountTurns): each turn reads the counter node, waits window, writes it + 1 and
// creates a LOG/t- sequential node with data "dlock".
func compatWorker(args []string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	raw, name, counter, log := args[0], args[1], args[2], args[3]
	n, _ := strconv.Atoi(args[4])
	window, _ := time.ParseDuration(args[5])
	u, _ := url.Parse(raw)
	d, err := Open(ctx, u)
	if err != nil {
		fmt.Println("ERROR", err)
		return 2
	}
	c := dlock.New(d)
	defer c.Close()
	conn := d.Conn()
	return dlocktest.CountTurns(n, 10*time.Millisecond, dlocktest.MutexTurns(ctx, c.Mutex(name)), func(uint64) error {
		data, _, err := conn.Get(counter)
		if err != nil {
			return err
		}
		v, _ := strconv.Atoi(string(data))
		time.Sleep(window)
		if _, err := conn.Set(counter, []byte(strconv.Itoa(v+1)), -1); err != nil {
			return err
		}
		_, err = conn.Create(log+"/t-", []byte("dlock"), zk.FlagSequence, zk.WorldACL(zk.PermAll))
		return err
	})
}

// foreign starts the foreign recipe's client of a layout.
type foreign struct {
	layout string
	side   string // its mark in the turn log
	// cmd makes the command that runs the client against lock path
	// name in mode (see testdata/kazoo_lock.py, testdata/CuratorLock.java).
	cmd func(name, mode string, args ...string) *exec.Cmd
}

// start starts the client and reads its lines; a Java client's first
// line, READY, is consumed.
func (f foreign) start(t *testing.T, name, mode string, args ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := f.cmd(name, mode, args...)
	lines := testenv.StartLines(t, cmd)
	if f.layout == Curator {
		if !lines.Scan() || lines.Text() != "READY" {
			t.Fatalf("curator client: %q (%v)", lines.Text(), lines.Err())
		}
	}
	return cmd, lines
}

// hold starts a foreign holder of name.
func (f foreign) hold(t *testing.T, name string) *exec.Cmd {
	t.Helper()
	cmd, lines := f.start(t, name, "hold")
	if !lines.Scan() || lines.Text() != "HELD" {
		t.Fatalf("%s holder: %q", f.layout, lines.Text())
	}
	return cmd
}

// try reports whether the foreign client's non-blocking acquire of name
// succeeds (it releases at once if so).
func (f foreign) try(t *testing.T, name string) bool {
	t.Helper()
	cmd, lines := f.start(t, name, "try")
	if !lines.Scan() {
		t.Fatalf("%s try: no answer (%v)", f.layout, cmd.Wait())
	}
	switch strings.ToLower(lines.Text()) {
	case "true":
		return true
	case "false":
		return false
	}
	t.Fatalf("%s try: %q", f.layout, lines.Text())
	return false
}

func kazooClient(t *testing.T, z *testenv.ZooKeeper) foreign {
	py := testenv.RequirePython(t, "python3-kazoo")
	script, _ := filepath.Abs("testdata/kazoo_lock.py")
	hosts := strings.Join(z.Addrs(), ",")
	return foreign{layout: Kazoo, side: "kazoo", cmd: func(name, mode string, args ...string) *exec.Cmd {
		return exec.Command(py, append([]string{script, hosts, name, fmt.Sprint(compatSession.Seconds()), mode}, args...)...)
	}}
}

func curatorClient(t *testing.T, z *testenv.ZooKeeper) foreign {
	src, _ := filepath.Abs("testdata/CuratorLock.java")
	java := testenv.JavaProgram(t, "libcurator-recipes-java", src, testenv.CuratorJars)
	connect := strings.Join(z.Addrs(), ",")
	return foreign{layout: Curator, side: "curator", cmd: func(name, mode string, args ...string) *exec.Cmd {
		return java(append([]string{connect, name, strconv.Itoa(int(compatSession.Milliseconds())), mode}, args...)...)
	}}
}

// TestCompat runs dlock beside each foreign recipe, on one server.
func TestCompat(t *testing.T) {
	z := testenv.StartZooKeeper(t, testenv.ZooKeeperOptions{})
	for _, layout := range Layouts {
		t.Run(layout, func(t *testing.T) {
			f := kazooClient
			if layout == Curator {
				f = curatorClient
			}
			client := f(t, z)
			u := zkURL(z.Addrs(), "", "compat="+layout+"&session_timeout="+compatSession.String())
			root := "/" + layout
			t.Run("MixedFleetLosesNoIncrement", func(t *testing.T) {
				const n = 100
				got, turns := mixedFleet(t, z, client, u, root+"/fleet", n)
				dlocktest.MixedFleetTurns(t, got, turns, [2]string{"dlock", client.side}, fleetWorkers*n, 100)
			})
			t.Run("WithoutCompatMixedFleetLosesIncrements", func(t *testing.T) {
				const n = 30
				got, _ := mixedFleet(t, z, client, zkURL(z.Addrs(), "", "session_timeout="+compatSession.String()), root+"/ownfleet", n)
				dlocktest.MixedFleetLosesIncrements(t, got, 2*fleetWorkers*n)
			})
			t.Run("KilledForeignHolderFreesLockForDlockWaiter", func(t *testing.T) { testKilledForeignHolder(t, client, u, root+"/jobs/nightly") })
			t.Run("DlockAndForeignExcludeEachOther", func(t *testing.T) { testExcludeEachOther(t, client, u, root+"/reports/render") })
			t.Run("ForeignWaiterQueuesBehindDlockHolder", func(t *testing.T) { testForeignWaiter(t, client, u, root+"/queue") })
			t.Run("WithoutCompatForeignDoesNotSeeDlockLocks", func(t *testing.T) {
				testWithoutCompat(t, client, zkURL(z.Addrs(), "", "session_timeout="+compatSession.String()), root+"/own")
			})
			t.Run("ListFindsForeignHoldersUnderPrefix", func(t *testing.T) { testCompatList(t, client, u, root+"/locks") })
			t.Run("ConnectionCutsDuringLockLeaveNoOrphans", func(t *testing.T) {
				cutLocksLeaveNoOrphans(t, z, "", "compat="+layout+"&session_timeout="+testSession.String(), root+"/cuts")
			})
			t.Run("PathIsMadeAsTheForeignRecipeMakesItAndItsDataKept", func(t *testing.T) { testCompatPath(t, z, u, layout, root+"/made/here") })
		})
	}
}

// fleetWorkers is the number of workers of each kind in a mixed fleet.
const fleetWorkers = 3

// mixedFleet runs fleetWorkers dlock processes (URL u) and as many
// foreign processes, each taking n turns at incrementing one counter node
// under the lock path base/lock, with a read–sleep–write window, and
// returns the counter's final value and the kind of each turn, in order.
// In a compat layout none is lost, and the two kinds take turns with each
// other hundreds of times; in dlock's own layout increments are lost.
func mixedFleet(t *testing.T, z *testenv.ZooKeeper, f foreign, u, base string, n int) (int, []string) {
	t.Helper()
	const (
		workers = fleetWorkers
		window  = 2 * time.Millisecond
	)
	name, counter, log := base+"/lock", base+"/counter", base+"/turns"
	conn := connect(t, z)
	for i, p := range []string{filepath.Dir(base), base, counter, log} {
		_, err := conn.Create(p, []byte("0"), 0, zk.WorldACL(zk.PermAll))
		if err != nil && !(i == 0 && errors.Is(err, zk.ErrNodeExists)) { // the parent is shared by the runs
			t.Fatal(err)
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	done := make(chan string, 2*workers)
	wait := func(side string, lines *bufio.Scanner) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lines.Scan()
			done <- side + ": " + lines.Text()
		}()
	}
	for range workers {
		child := dlocktest.WorkerCommand("compat", u, name, counter, log, strconv.Itoa(n), window.String())
		wait("dlock", testenv.StartLines(t, child))
		args := []string{counter, log, strconv.Itoa(n)}
		if f.layout == Curator {
			args = append(args, strconv.Itoa(int(window.Milliseconds())))
		} else {
			args = append(args, fmt.Sprint(window.Seconds()))
		}
		_, lines := f.start(t, name, "count", args...)
		wait(f.side, lines)
	}
	wg.Wait()
	close(done)
	for line := range done {
		if !strings.HasSuffix(line, "DONE "+strconv.Itoa(n)) {
			t.Errorf("a worker ended with %q", line)
		}
	}
	data, _, err := conn.Get(counter)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := strconv.Atoi(string(data))
	kids, _, err := conn.Children(log)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(kids) // the server's sequence: the order of the turns
	turns := make([]string, len(kids))
	for i, k := range kids {
		d, _, err := conn.Get(log + "/" + k)
		if err != nil {
			t.Fatal(err)
		}
		turns[i] = string(d)
	}
	t.Logf("%d turns in %v", len(turns), time.Since(start).Round(time.Millisecond))
	return got, turns
}

// A foreign holder killed with SIGKILL frees the lock when its session
// times out, and a dlock waiter is granted it then: not before the kill,
// and within the session timeout (plus a margin) after it. Meanwhile
// dlock's TryLock finds the lock held, and Inspect shows a holder that is
// not dlock's, with no token (dlocktest.ForeignHolderKilled).
func testKilledForeignHolder(t *testing.T, f foreign, u, name string) {
	holder := f.hold(t, name)
	c := openClient(t, u)
	in, err := c.Inspect(context.Background(), name)
	if err != nil || !strings.Contains(in.Holder.Note, f.layout+" contender") {
		t.Errorf("Inspect = %+v, %v; want a note naming a %s contender", in, err, f.layout)
	}
	l := dlocktest.ForeignHolderKilled(t, c, name, compatSession, func() {
		if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	})
	_ = l.Unlock(context.Background())
}

// Each side's lock excludes the other: the foreign non-blocking acquire
// fails while dlock holds the lock path, and dlock's TryLock fails while
// the foreign client holds it; Break deletes the foreign holder's node.
func testExcludeEachOther(t *testing.T, f foreign, u, name string) {
	c := openClient(t, u)
	ctx := testenv.Context(t, time.Minute)
	l, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f.try(t, name) {
		t.Fatalf("%s acquired the lock while dlock held it", f.layout)
	}
	first := l.Token()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !f.try(t, name) {
		t.Fatalf("%s could not acquire the lock dlock had released", f.layout)
	}
	f.hold(t, name)
	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock while %s holds: %v, want ErrNotAcquired", f.layout, err)
	}
	if err := c.Break(ctx, name); err != nil {
		t.Fatal(err)
	}
	l, err = c.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after Break of the %s holder: %v", f.layout, err)
	}
	if l.Token() <= first {
		t.Errorf("token %d after the %s grants, want more than dlock's earlier %d", l.Token(), f.layout, first)
	}
	_ = l.Unlock(ctx)
}

// A foreign client that asks while dlock holds the lock queues behind
// dlock's node: Inspect shows it as a waiter, and it is granted when dlock
// releases (its watch is on dlock's node: neither library polls).
func testForeignWaiter(t *testing.T, f foreign, u, name string) {
	c := openClient(t, u)
	ctx := testenv.Context(t, time.Minute)
	l, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, lines := f.start(t, name, "hold")
	testenv.Eventually(t, 30*time.Second, "the foreign waiter behind dlock's holder", func() error {
		in, err := c.Inspect(ctx, name)
		switch {
		case err != nil:
			return err
		case in.Token != l.Token() || len(in.Waiters) != 1:
			return fmt.Errorf("%+v", in)
		case !strings.Contains(in.Waiters[0].Note, f.layout+" contender"):
			return testenv.Final(fmt.Errorf("waiter %+v, want a note naming a %s contender", in.Waiters[0], f.layout))
		}
		return nil
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !lines.Scan() || lines.Text() != "HELD" {
		t.Fatalf("the %s waiter after dlock's release: %q", f.layout, lines.Text())
	}
	if in, err := c.Inspect(ctx, name); err != nil || !in.Held || in.Token != 0 {
		t.Errorf("Inspect after the hand-off: %+v, %v; want held by the foreign client", in, err)
	}
}

// Without compat, dlock's locks are nodes of its own layout: the foreign
// client, locking the same name, does not see them (the README says so).
func testWithoutCompat(t *testing.T, f foreign, u, name string) {
	c := openClient(t, u)
	ctx := testenv.Context(t, time.Minute)
	l, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if !f.try(t, name) {
		t.Fatalf("%s could not acquire a name dlock holds in its own layout; the README says it can", f.layout)
	}
}

// List in a compat layout takes a path prefix, and finds every lock path
// under it with contenders, foreign ones too (with token 0).
func testCompatList(t *testing.T, f foreign, u, base string) {
	c := openClient(t, u)
	ctx := testenv.Context(t, time.Minute)
	mine, theirs := base+"/mine", base+"/deeper/theirs"
	l, err := c.Mutex(mine).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	f.hold(t, theirs)
	infos, err := c.List(ctx, base+"/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range infos {
		got = append(got, fmt.Sprintf("%s token=%d", in.Name, in.Token))
	}
	slices.Sort(got)
	want := []string{fmt.Sprintf("%s token=0", theirs), fmt.Sprintf("%s token=%d", mine, l.Token())}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("List(%s/) = %q; want %q", base, got, want)
	}
	if _, err := c.List(ctx, "locks"); !errors.Is(err, dlock.ErrInvalidName) {
		t.Errorf("List of a prefix that is not a path: %v, want ErrInvalidName", err)
	}
	defer func(n int) { listMax = n }(listMax)
	listMax = 3
	if _, err := c.List(ctx, base+"/"); err == nil || !strings.Contains(err.Error(), "give a longer prefix") {
		t.Errorf("List past listMax nodes: %v, want an error asking for a longer prefix", err)
	}
}

func openClient(t *testing.T, u string) *dlock.Client {
	t.Helper()
	c := dlock.New(openURL(t, u))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// connect opens a plain go-zookeeper connection, closed when the test ends.
func connect(t *testing.T, z *testenv.ZooKeeper) *zk.Conn {
	t.Helper()
	conn, _, err := zk.Connect(z.Addrs(), 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// The lock path is made as the foreign recipe makes it: persistent for
// kazoo, a container for Curator, which the server deletes once its last
// contender is gone (it hides the container mark from a node's stat: the
// test waits for a reference container, emptied after the lock path, to
// go, and then looks); and an existing lock node's data is left as it is.
func testCompatPath(t *testing.T, z *testenv.ZooKeeper, u, layout, name string) {
	c := openClient(t, u)
	ctx := testenv.Context(t, time.Minute)
	conn := connect(t, z)
	l, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Set(name, []byte("the application's"), -1); err != nil {
		t.Fatal(err)
	}
	_ = l.Unlock(ctx)
	if l, err = c.Mutex(name).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	_ = l.Unlock(ctx)
	if data, _, err := conn.Get(name); err != nil || string(data) != "the application's" {
		t.Errorf("the lock path's data after a grant: %q, %v; want it kept", data, err)
	}
	ref := filepath.Dir(name) + "/reference"
	if _, err := conn.CreateContainer(ref, nil, zk.FlagContainer, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Create(ref+"/child", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if err := conn.Delete(ref+"/child", -1); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the server's deletion of empty containers", func() error {
		if ok, _, err := conn.Exists(ref); err != nil || ok {
			return fmt.Errorf("%s still there (%v)", ref, err)
		}
		return nil
	})
	ok, _, err := conn.Exists(name)
	if err != nil {
		t.Fatal(err)
	}
	if want := layout == Kazoo; ok != want {
		t.Errorf("%s exists after the server deleted empty containers: %v, want %v (kazoo: persistent, curator: container)", name, ok, want)
	}
}

// The queue orders of the foreign recipes, on names their clients and the
// server make.
func TestCompatQueuesOrderAsTheForeignRecipes(t *testing.T) {
	names := func(q []queued) []string {
		var ns []string
		for _, e := range q {
			ns = append(ns, e.name)
		}
		return ns
	}
	// kazoo: "__lock__" and ten digits; ReadLock's nodes and others are
	// not contenders; the sequence, not the GUID, orders.
	kazoo := []string{"ffff__lock__0000000003", "aaaa__rlock__0000000001", "bbbb__lock__0000000002", "x", "cccc__lock__-000000001", "dddd__lock__12"}
	if got, want := names(kazooQueue(kazoo)), []string{"bbbb__lock__0000000002", "ffff__lock__0000000003"}; !slices.Equal(got, want) {
		t.Errorf("kazoo queue %q, want %q", got, want)
	}
	// Curator: every child, by what follows the last "lock-".
	curator := []string{"_c_ffff-lock-0000000003", "_c_aaaa-lock-0000000002", "other-0000000001"}
	if got, want := names(curatorQueue(curator)), []string{"_c_aaaa-lock-0000000002", "_c_ffff-lock-0000000003", "other-0000000001"}; !slices.Equal(got, want) {
		t.Errorf("curator queue %q, want %q", got, want)
	}
	for _, layout := range Layouts {
		d := &Driver{compat: layout}
		g := d.newGUID()
		node := d.nodePrefix(g) + "0000000001"
		if !d.isDlocks(node) || !d.isContender(node) {
			t.Errorf("%s: dlock's node %q is not recognised as dlock's contender", layout, node)
		}
		if q := d.queue([]string{node}); len(q) != 1 {
			t.Errorf("%s: dlock's node %q is not in the foreign queue", layout, node)
		}
	}
	if (&Driver{compat: Kazoo}).isDlocks("0123456789ab4def0123456789abcdef__lock__0000000001") {
		t.Error("kazoo's uuid4 node taken for dlock's")
	}
	if (&Driver{compat: Curator}).isDlocks("_c_01234567-89ab-4def-8123-456789abcdef-lock-0000000001") {
		t.Error("Curator's UUID node taken for dlock's")
	}
}

// In a compat layout the name is the foreign lock path: anything else is
// refused, saying so; so are a root in the URL and an unknown layout.
func TestCompatRefusesNamesThatAreNotLockPaths(t *testing.T) {
	for _, name := range []string{"orders/42", "/", "/a/", "/a//b", "/a/./b", "/a/..", "/zookeeper/x", "/a\x00b", "/a\x01"} {
		if _, err := compatPath(name); !errors.Is(err, dlock.ErrInvalidName) || !strings.Contains(err.Error(), "lock path") {
			t.Errorf("compatPath(%q) = %v, want ErrInvalidName saying the name is the lock path", name, err)
		}
	}
	for _, name := range []string{"/locks/orders", "/a", "/app/locks/ключ"} {
		if _, err := compatPath(name); err != nil {
			t.Errorf("compatPath(%q) = %v", name, err)
		}
	}
	for raw, want := range map[string]string{
		"zk://127.0.0.1:1/root?compat=kazoo": "takes no root",
		"zk://127.0.0.1:1?compat=zkrecipes":  "want one of kazoo, curator",
	} {
		u, _ := url.Parse(raw)
		if _, err := Open(context.Background(), u); !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%s) = %v, want ErrInvalidOption saying %q", raw, err, want)
		}
	}
}
