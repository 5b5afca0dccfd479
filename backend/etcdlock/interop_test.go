package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/internal/testenv"
)

// The tests here run dlock in compat=etcdctl beside the two clients of
// etcd's own lock recipe: "etcdctl lock" (Debian's etcd-client, 3.4) and
// concurrency.Mutex (etcd's Go client, in processes of their own).

func init() {
	for _, kind := range []string{"dlock", "own", "mutex"} {
		dlocktest.Worker(kind, func(args []string) int { return countWorker(kind, args) })
	}
}

// countWorker (args: endpoint name counter log n window) n times takes
// the lock name — with dlock in compat=etcdctl ("dlock"), with dlock in
// its own layout ("own"), or with concurrency.Mutex — reads the counter file, waits window, writes
// it + 1 and appends "KIND TOKEN" to the log file, then releases and
// pauses up to 5ms (dlocktest.CountTurns). A Mutex's token is its key's
// create revision, read back after Lock: Mutex gives none itself.
func countWorker(kind string, args []string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	endpoint, name, counter, log := args[0], args[1], args[2], args[3]
	n, _ := strconv.Atoi(args[4])
	window, _ := time.ParseDuration(args[5])
	fail := func(err error) int {
		fmt.Println("ERROR", err)
		return 2
	}
	var lock func() (uint64, func() error, error)
	switch kind {
	case "dlock", "own":
		u := "etcd://" + endpoint + "?compat=etcdctl"
		if kind == "own" {
			u = "etcd://" + endpoint
		}
		c, err := dlock.Open(ctx, u)
		if err != nil {
			return fail(err)
		}
		defer c.Close()
		lock = dlocktest.MutexTurns(ctx, c.Mutex(name, dlock.WithTTL(5*time.Second)))
	case "mutex":
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return fail(err)
		}
		defer cli.Close()
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
		if err != nil {
			return fail(err)
		}
		defer s.Close()
		m := concurrency.NewMutex(s, name)
		lock = func() (uint64, func() error, error) {
			if err := m.Lock(ctx); err != nil {
				return 0, nil, err
			}
			resp, err := cli.Get(ctx, m.Key())
			if err != nil || len(resp.Kvs) == 0 {
				return 0, nil, fmt.Errorf("the key %q of the lock just taken: %v", m.Key(), err)
			}
			return uint64(resp.Kvs[0].CreateRevision), func() error { return m.Unlock(ctx) }, nil
		}
	default:
		return fail(fmt.Errorf("unknown worker kind %q", kind))
	}
	return dlocktest.CountTurns(n, 5*time.Millisecond, lock, func(token uint64) error {
		if err := increment(counter, window); err != nil {
			return err
		}
		return appendLine(log, fmt.Sprintf("%s %d", kind, token))
	})
}

// increment reads the number in file, waits window, and writes it + 1:
// the read–sleep–write that loses updates unless it runs alone. The write
// replaces the file whole (a rename), so that a reader that is not
// excluded, in the test without compat, reads a number and not a file
// half written.
func increment(file string, window time.Duration) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return err
	}
	time.Sleep(window)
	tmp, err := os.CreateTemp(filepath.Dir(file), ".count-*")
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(tmp, v+1); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

func appendLine(file, line string) error {
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// compatLocker returns a dlock client in compat=etcdctl on srv.
func compatLocker(t *testing.T, srv *testenv.Etcd, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.Open(testContext(t), "etcd://"+srv.Endpoints()[0]+"?compat=etcdctl", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// etcdctlHold runs "etcdctl lock --ttl TTL name" (which prints its key and
// holds the lock until it is signalled) and returns the process and its
// key, once it holds the lock.
func etcdctlHold(t *testing.T, srv *testenv.Etcd, name string, ttl int) (*exec.Cmd, string) {
	t.Helper()
	cmd := srv.Etcdctl(t, "lock", "--ttl="+strconv.Itoa(ttl), name)
	lines := testenv.StartLines(t, cmd)
	if !lines.Scan() {
		t.Fatalf("etcdctl lock %s printed no key (%v)", name, cmd.Wait())
	}
	return cmd, lines.Text()
}

// mutexSession returns a concurrency session of a client of its own.
func mutexSession(t *testing.T, srv *testenv.Etcd) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(newClient(t, srv.Endpoints()), concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// bothSeeHeld checks that name is held for dlock (TryLock fails) and for
// concurrency.Mutex (TryLock, on a session of its own, fails); what names
// the holder.
func bothSeeHeld(t *testing.T, srv *testenv.Etcd, c *dlock.Client, name, what string) {
	t.Helper()
	ctx := testContext(t)
	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("dlock TryLock of %s while %s: %v, want ErrNotAcquired", name, what, err)
	}
	if err := concurrency.NewMutex(mutexSession(t, srv), name).TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Errorf("concurrency.Mutex TryLock of %s while %s: %v, want ErrLocked", name, what, err)
	}
}

// createRevision returns the create revision of key, read at revision rev
// (0: now); 0 if it did not exist then.
func createRevision(t *testing.T, cli *clientv3.Client, key string, rev int64) int64 {
	t.Helper()
	resp, err := cli.Get(testContext(t), key, clientv3.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].CreateRevision
}

// N dlock processes and N foreign processes — etcdctl lock in a shell
// loop, and concurrency.Mutex in Go — increment one counter under the same
// lock, with a read–sleep–write window: none is lost, and dlock and the
// others take turns with each other hundreds of times. Every grant, of
// either kind, is in create-revision order: dlock's tokens and the create
// revisions of the foreign keys make one increasing sequence (a Mutex's
// read back after Lock; etcdctl's read at the revision of ETCD_LOCK_REV).
// ETCD_LOCK_REV itself is not that token: after a wait it is the
// revision of etcdctl's read that found the lock free, past its key's
// create revision and even past the token of the dlock holder after it,
// and the test finds such turns.
func TestMixedFleetWithEtcdctlAndMutexLosesNoIncrement(t *testing.T) {
	srv := startServer(t)
	etcdctl := testenv.Etcdctl(t)
	const (
		name               = "orders/42"
		workers            = 2       // of each kind: dlock, etcdctl, concurrency.Mutex
		nGo, nEtcdctl      = 100, 50 // turns of each Go worker, of each etcdctl loop
		window             = 2 * time.Millisecond
		minSwitches        = 100
		kindDlock, kindCtl = "dlock", "etcdctl"
	)
	dir := t.TempDir()
	counter, log := filepath.Join(dir, "stock"), filepath.Join(dir, "turns")
	if err := os.WriteFile(counter, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script, _ := filepath.Abs("testdata/etcdctl_count.sh")
	start := time.Now()
	var wg sync.WaitGroup
	done := make(chan string, 3*workers)
	run := func(kind string, cmd *exec.Cmd) {
		lines := testenv.StartLines(t, cmd)
		wg.Add(1)
		go func() {
			defer wg.Done()
			lines.Scan()
			done <- kind + ": " + lines.Text()
		}()
	}
	for range workers {
		for _, kind := range []string{"dlock", "mutex"} {
			run(kind, dlocktest.WorkerCommand(kind, srv.Endpoints()[0], name, counter, log, strconv.Itoa(nGo), window.String()))
		}
		loop := exec.Command("sh", script, etcdctl, srv.Endpoints()[0], name, counter, log,
			strconv.Itoa(nEtcdctl), strconv.FormatFloat(window.Seconds(), 'f', -1, 64))
		// The loop's etcdctl and sh children go with it if the test ends
		// early: it leads a process group of its own.
		loop.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		run(kindCtl, loop)
		t.Cleanup(func() { _ = syscall.Kill(-loop.Process.Pid, syscall.SIGKILL) })
	}
	wg.Wait()
	close(done)
	elapsed := time.Since(start)
	for line := range done {
		if !strings.Contains(line, "DONE ") {
			t.Errorf("a worker ended with %q", line)
		}
	}
	want := workers * (2*nGo + nEtcdctl)
	b, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	got, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	turns, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	cli := newClient(t, srv.Endpoints())
	sides := map[string]int{}
	switches, revPastKey, revPastNext := 0, 0, 0
	var last, ctlRev int64 // ctlRev: ETCD_LOCK_REV of the turn before, if etcdctl's
	prev := ""
	for i, line := range strings.Split(strings.TrimSpace(string(turns)), "\n") {
		f := strings.Fields(line)
		kind := f[0]
		sides[kind]++
		var token, rev int64
		if kind == kindCtl {
			rev, _ = strconv.ParseInt(f[2], 10, 64)
			token = createRevision(t, cli, f[1], rev)
			if token == 0 || rev < token {
				t.Errorf("turn %d: etcdctl's key %s at ETCD_LOCK_REV %d has create revision %d", i, f[1], rev, token)
			}
			if rev > token {
				revPastKey++
			}
		} else {
			token, _ = strconv.ParseInt(f[1], 10, 64)
		}
		if token <= last {
			t.Errorf("turn %d (%s) has token %d after %d: grants out of create-revision order", i, kind, token, last)
		}
		if kind == kindDlock && ctlRev >= token {
			revPastNext++ // a resource fencing with ETCD_LOCK_REV would refuse this dlock holder
		}
		last, ctlRev = token, rev
		if side := kind == kindDlock; i > 0 && side != (prev == kindDlock) {
			switches++
		}
		prev = kind
	}
	t.Logf("counter %d of %d increments in %v; turns %v; the lock passed between dlock and the foreign clients %d times; %d etcdctl turns had ETCD_LOCK_REV past their key's create revision, %d at or past the token of the dlock holder after them",
		got, want, elapsed.Round(time.Millisecond), sides, switches, revPastKey, revPastNext)
	if got != want {
		t.Errorf("counter = %d, want %d: %d increments lost", got, want, want-got)
	}
	if sides[kindDlock] != workers*nGo || sides["mutex"] != workers*nGo || sides[kindCtl] != workers*nEtcdctl {
		t.Errorf("turns = %v, want %d of dlock and of mutex, %d of etcdctl", sides, workers*nGo, workers*nEtcdctl)
	}
	if switches < minSwitches {
		t.Errorf("the lock passed between dlock and the others %d times, want at least %d for the run to show them excluding each other", switches, minSwitches)
	}
	if revPastKey == 0 || revPastNext == 0 {
		t.Errorf("ETCD_LOCK_REV was past the key's create revision in %d etcdctl turns, and at or past the next dlock holder's token in %d; the package doc says both happen", revPastKey, revPastNext)
	}
}

// The same fleet with dlock in its own layout (no compat), beside
// concurrency.Mutex: the Mutex does not see dlock's keys, the two kinds
// hold at once, and increments are lost, as the README warns.
func TestMixedFleetWithoutCompatLosesIncrements(t *testing.T) {
	srv := startServer(t)
	const (
		name    = "orders/42"
		workers = 2 // of each kind
		n       = 40
		window  = 5 * time.Millisecond
	)
	dir := t.TempDir()
	counter, log := filepath.Join(dir, "stock"), filepath.Join(dir, "turns")
	if err := os.WriteFile(counter, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan string, 2*workers)
	for range workers {
		for _, kind := range []string{"own", "mutex"} {
			lines := testenv.StartLines(t, dlocktest.WorkerCommand(kind, srv.Endpoints()[0], name, counter, log, strconv.Itoa(n), window.String()))
			wg.Add(1)
			go func() {
				defer wg.Done()
				lines.Scan()
				done <- kind + ": " + lines.Text()
			}()
		}
	}
	wg.Wait()
	close(done)
	for line := range done {
		if !strings.HasSuffix(line, "DONE "+strconv.Itoa(n)) {
			t.Errorf("a worker ended with %q", line)
		}
	}
	b, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	got, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	dlocktest.MixedFleetLosesIncrements(t, got, 2*workers*n)
}

// An etcdctl lock holder killed with SIGKILL stops renewing its session
// lease; etcd lets it expire after --ttl, which deletes its key, and the
// dlock waiter behind it is granted the lock then: not before the kill,
// and within the TTL (plus a margin) after it. Meanwhile dlock's TryLock
// finds the lock held, and Inspect shows a holder that is not dlock's,
// named by its lease and key, with its key's create revision as the token
// (dlocktest.ForeignHolderKilledWithToken).
func TestKilledEtcdctlHolderFreesLockForDlockWaiter(t *testing.T) {
	srv := startServer(t)
	const name, ttl = "jobs/nightly", 2 // etcd's shortest lease here
	holder, key := etcdctlHold(t, srv, name, ttl)
	cli := newClient(t, srv.Endpoints())
	rev := createRevision(t, cli, key, 0)
	c := compatLocker(t, srv, dlock.WithTTL(5*time.Second))
	in, err := c.Inspect(testContext(t), name)
	if err != nil || !strings.Contains(in.Holder.Note, "not dlock") || !strings.Contains(in.Holder.Note, key) ||
		!strings.Contains(in.Holder.Note, "lease "+strings.TrimPrefix(key, name+"/")) {
		t.Errorf("Inspect = %+v, %v; want a note naming etcdctl's lease and key %s", in, err, key)
	}
	l := dlocktest.ForeignHolderKilledWithToken(t, c, name, uint64(rev), ttl*time.Second, func() {
		if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	})
	_ = l.Unlock(context.Background())
}

// Each side's lock excludes the other. While dlock holds the lock,
// etcdctl lock queues behind dlock's key and runs its command only after
// dlock's release, and concurrency.Mutex's TryLock fails; while etcdctl
// or a Mutex holds it, dlock's TryLock fails. dlock's key is the one
// concurrency.Mutex would write for dlock's lease: NAME/<lease in hex>,
// attached to that lease.
func TestDlockAndEtcdctlExcludeEachOther(t *testing.T) {
	srv := startServer(t)
	const name = "reports/render"
	ctx := testContext(t)
	c := compatLocker(t, srv)
	cli := newClient(t, srv.Endpoints())
	l, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, name+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != fmt.Sprintf("%s/%x", name, resp.Kvs[0].Lease) ||
		resp.Kvs[0].CreateRevision != int64(l.Token()) {
		t.Fatalf("keys under %s/ while dlock holds it: %v; want one, %s/<its lease in hex>, created at the token %d", name, resp.Kvs, name, l.Token())
	}
	bothSeeHeld(t, srv, c, name, "dlock holds it")

	waiter := srv.Etcdctl(t, "lock", name, "--", "sh", "-c", `echo "$ETCD_LOCK_KEY"`)
	ran := make(chan string, 1)
	lines := testenv.StartLines(t, waiter)
	go func() {
		lines.Scan()
		ran <- lines.Text()
	}()
	var waiterNote string
	testenv.Eventually(t, 10*time.Second, "etcdctl lock queued behind dlock", func() error {
		in, err := c.Inspect(ctx, name)
		if err != nil {
			return err
		}
		if in.Token != l.Token() || len(in.Waiters) != 1 {
			return fmt.Errorf("Inspect = %+v", in)
		}
		waiterNote = in.Waiters[0].Note
		return nil
	})
	select {
	case key := <-ran:
		t.Fatalf("etcdctl lock ran its command (key %q) while dlock held the lock", key)
	default:
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case key := <-ran:
		if key == "" || !strings.Contains(waiterNote, key) {
			t.Errorf("etcdctl ran its command with key %q; Inspect showed the waiter as %q", key, waiterNote)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("etcdctl lock did not run its command after dlock released")
	}
	if err := waiter.Wait(); err != nil {
		t.Errorf("etcdctl lock: %v", err)
	}

	holder, key := etcdctlHold(t, srv, name, 10)
	bothSeeHeld(t, srv, c, name, "etcdctl lock holds it")
	// Break deletes etcdctl's key, which etcdctl does not notice: it holds
	// on to its session.
	if err := c.Break(ctx, name); err != nil {
		t.Fatal(err)
	}
	if rev := createRevision(t, cli, key, 0); rev != 0 {
		t.Errorf("etcdctl's key %s is still there after Break", key)
	}
	l, err = c.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after Break of etcdctl's lock: %v", err)
	}
	_ = l.Unlock(ctx)
	_ = holder.Process.Signal(syscall.SIGTERM)

	m := concurrency.NewMutex(mutexSession(t, srv), name)
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	bothSeeHeld(t, srv, c, name, "concurrency.Mutex holds it")
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err = c.Mutex(name).TryLock(ctx); err != nil {
		t.Fatalf("TryLock after concurrency.Mutex released: %v", err)
	}
	_ = l.Unlock(ctx)
}

// As in etcdctl lock, the queue of a name is every key under NAME/, so a
// lock whose name is another's followed by "/" waits in that one's queue:
// while "jobs/a" is held, neither dlock nor concurrency.Mutex can take
// "jobs"; "jobs/a/b" is a queue of its own.
func TestEtcdctlCompatNestedNamesShareTheOuterQueue(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	c := compatLocker(t, srv)
	l, err := c.Mutex("jobs/a").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	bothSeeHeld(t, srv, c, "jobs", "jobs/a is held")
	inner, err := c.Mutex("jobs/a/b").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock of jobs/a/b while jobs/a is held: %v", err)
	}
	_ = inner.Unlock(ctx)
}

// List in compat=etcdctl finds the locks of concurrency.Mutex's layout
// whose names begin with the prefix, dlock's and etcdctl's alike, each
// with its holder's create revision as the token; other keys are not
// locks.
func TestEtcdctlCompatListFindsForeignHolders(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	c := compatLocker(t, srv)
	cli := newClient(t, srv.Endpoints())
	l, err := c.Mutex("locks/mine").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	_, key := etcdctlHold(t, srv, "locks/theirs", 10)
	theirs := createRevision(t, cli, key, 0)
	lease, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []struct{ key, lease string }{
		{"locks/config", ""},          // no lease
		{"locks/other/1234", "lease"}, // a lease, but not its ID
		{"locks/plain/" + "abc", ""},  // a hex name without a lease
	} {
		var opts []clientv3.OpOption
		if kv.lease != "" {
			opts = append(opts, clientv3.WithLease(lease.ID))
		}
		if _, err := cli.Put(ctx, kv.key, "x", opts...); err != nil {
			t.Fatal(err)
		}
	}
	want := fmt.Sprintf("locks/mine token=%d,locks/theirs token=%d", l.Token(), theirs)
	for _, prefix := range []string{"locks/", ""} {
		infos, err := c.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, in := range infos {
			got = append(got, fmt.Sprintf("%s token=%d", in.Name, in.Token))
		}
		if strings.Join(got, ",") != want {
			t.Errorf("List(%q) = %v; want %s", prefix, got, want)
		}
	}
}

// Without compat, dlock's keys live under its own prefix: etcdctl lock,
// locking the name, does not see dlock's lock and runs its command at
// once (the README says so).
func TestWithoutCompatEtcdctlDoesNotSeeDlockLocks(t *testing.T) {
	srv := startServer(t)
	const name = "reports/render"
	ctx := testContext(t)
	l, err := newLocker(t, srv.Endpoints()).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	cmd := srv.Etcdctl(t, "lock", name, "--", "echo", "RAN")
	lines := testenv.StartLines(t, cmd)
	ran := make(chan bool, 1)
	go func() { ran <- lines.Scan() && lines.Text() == "RAN" }()
	select {
	case ok := <-ran:
		if !ok {
			t.Fatalf("etcdctl lock: %v", cmd.Wait())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("etcdctl lock waited for a lock dlock holds in its own layout; the README says it does not see it")
	}
}
