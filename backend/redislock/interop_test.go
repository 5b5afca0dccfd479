package redislock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/redislock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/internal/testenv"
)

// The tests here run dlock in compat=setnx beside redis-py's Lock (Debian's
// python3-redis, run by testenv.Python), on one lock key.

func init() { dlocktest.Worker("setnx", setnxWorker) }

// setnxWorker (args: URL addr name counter log n window) n times takes
// the lock, reads the counter, waits window,
// writes it + 1 and logs "dlock", then releases; it pauses up to 10ms
// between turns, as a worker doing other work would (redis-py's workers
// too), so that the lock is now and then free when a polling redis-py
// waiter looks.
func setnxWorker(args []string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, addr, name, counter, log := args[0], args[1], args[2], args[3], args[4]
	n, _ := strconv.Atoi(args[5])
	window, _ := time.ParseDuration(args[6])
	c, err := dlock.Open(ctx, u)
	if err != nil {
		fmt.Println("ERROR", err)
		return 2
	}
	defer c.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	m := c.Mutex(name, dlock.WithTTL(2*time.Second))
	return dlocktest.CountTurns(n, 10*time.Millisecond, dlocktest.MutexTurns(ctx, m), func(uint64) error {
		v, err := rdb.Get(ctx, counter).Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		time.Sleep(window)
		if err := rdb.Set(ctx, counter, v+1, 0).Err(); err != nil {
			return err
		}
		return rdb.RPush(ctx, log, "dlock").Err()
	})
}

// redisPy runs testdata/redispy_lock.py against srv's lock name with mode
// and args, and returns the command, started, with its stdout lines.
func redisPy(t *testing.T, srv *testenv.Redis, name, mode string, args ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := redisPyCmd(t, srv, name, mode, args...)
	return cmd, testenv.StartLines(t, cmd)
}

func redisPyCmd(t *testing.T, srv *testenv.Redis, name, mode string, args ...string) *exec.Cmd {
	py := testenv.RequirePython(t, "python3-redis")
	host, port, _ := strings.Cut(srv.Addr, ":")
	script, _ := filepath.Abs("testdata/redispy_lock.py")
	return exec.Command(py, append([]string{script, host, port, name, mode}, args...)...)
}

// eachKeyspaceSetting runs f as a subtest on a server that announces
// deletions and expiries (notify-keyspace-events Kgx), and on one that
// does not (dlock's waiters then poll).
func eachKeyspaceSetting(t *testing.T, f func(t *testing.T, srv *testenv.Redis, keyspace bool)) {
	for _, keyspace := range []bool{true, false} {
		t.Run(fmt.Sprintf("keyspace_events=%v", keyspace), func(t *testing.T) {
			testenv.RequirePython(t, "python3-redis")
			var opts []testenv.RedisOption
			if keyspace {
				opts = append(opts, testenv.RedisArgs("--notify-keyspace-events", "Kgx"))
			}
			f(t, testenv.StartRedis(t, opts...), keyspace)
		})
	}
}

// redisPyStdin is redisPy with a pipe to the script's stdin.
func redisPyStdin(t *testing.T, srv *testenv.Redis, name, mode string, args ...string) (*exec.Cmd, io.Writer, *bufio.Scanner) {
	t.Helper()
	cmd := redisPyCmd(t, srv, name, mode, args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	return cmd, in, testenv.StartLines(t, cmd)
}

// redisPyTry reports whether redis-py's non-blocking acquire of name
// succeeds (it releases at once if so).
func redisPyTry(t *testing.T, srv *testenv.Redis, name string) bool {
	t.Helper()
	cmd, lines := redisPy(t, srv, name, "try", "5")
	if !lines.Scan() {
		t.Fatalf("redis-py try: no answer (%v)", cmd.Wait())
	}
	switch lines.Text() {
	case "True":
		return true
	case "False":
		return false
	}
	t.Fatalf("redis-py try: %q", lines.Text())
	return false
}

// N dlock processes and N redis-py processes increment one counter under
// the same lock, with a read–sleep–write window: none is lost, and the two
// kinds take turns with each other hundreds of times. Run with and
// without keyspace events. Without them dlock's waiters learn of
// redis-py's releases by polling (every 100ms or less) while redis-py's
// poll every 1ms, so dlock gets the lock mostly from its own side's
// releases, and the sides alternate less often.
func TestMixedFleetWithRedisPyLosesNoIncrement(t *testing.T) {
	eachKeyspaceSetting(t, func(t *testing.T, srv *testenv.Redis, keyspace bool) {
		minSwitches := 100
		if !keyspace {
			minSwitches = 20
		}
		const n = 150
		got, turns := redisPyFleet(t, srv, "redis://"+srv.Addr+"?compat=setnx", n)
		dlocktest.MixedFleetTurns(t, got, turns, [2]string{"dlock", "py"}, fleetWorkers*n, minSwitches)
	})
}

// The same fleet with dlock in its own layout (no compat): redis-py does
// not see dlock's locks, the two kinds hold at once, and increments are
// lost, as the README warns.
func TestMixedFleetWithoutCompatLosesIncrements(t *testing.T) {
	testenv.RequirePython(t, "python3-redis")
	srv := testenv.StartRedis(t)
	// Enough turns that the two kinds overlap however their processes
	// start: with 30, a run at a load average of 13 lost none.
	const n = 100
	got, _ := redisPyFleet(t, srv, "redis://"+srv.Addr, n)
	dlocktest.MixedFleetLosesIncrements(t, got, 2*fleetWorkers*n)
}

// fleetWorkers is the number of workers of each kind in a mixed fleet.
const fleetWorkers = 3

// redisPyFleet runs fleetWorkers dlock processes (URL u) and as many
// redis-py processes, each taking n turns at incrementing one counter
// under the lock orders:42:lock, with a 2ms read–sleep–write window, and
// returns the counter's final value and the kind of each turn, in order.
func redisPyFleet(t *testing.T, srv *testenv.Redis, u string, n int) (int, []string) {
	t.Helper()
	const (
		name, counter, log = "orders:42:lock", "orders:42:stock", "orders:42:turns"
		window             = "2ms"
	)
	var wg sync.WaitGroup
	done := make(chan string, 2*fleetWorkers)
	for range fleetWorkers {
		lines := testenv.StartLines(t, dlocktest.WorkerCommand("setnx", u, srv.Addr, name, counter, log, strconv.Itoa(n), window))
		wg.Add(1)
		go func() {
			defer wg.Done()
			lines.Scan()
			done <- "dlock: " + lines.Text()
		}()
		_, py := redisPy(t, srv, name, "count", counter, log, strconv.Itoa(n), "0.002", "2")
		wg.Add(1)
		go func() {
			defer wg.Done()
			py.Scan()
			done <- "redis-py: " + py.Text()
		}()
	}
	wg.Wait()
	close(done)
	for line := range done {
		if !strings.HasSuffix(line, "DONE "+strconv.Itoa(n)) {
			t.Errorf("a worker ended with %q", line)
		}
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	got, err := rdb.Get(ctx, counter).Int()
	if err != nil {
		t.Fatal(err)
	}
	turns, err := rdb.LRange(ctx, log, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return got, turns
}

// A redis-py holder killed with SIGKILL frees the lock when its timeout
// runs out, and a dlock waiter is granted it then: not before the kill,
// and within the timeout (plus a margin) after it. Meanwhile dlock's
// TryLock finds the lock held, and Inspect shows a holder of unknown
// identity, with no token, and redis-py's remaining TTL
// (dlocktest.ForeignHolderKilled).
func TestKilledRedisPyHolderFreesLockForDlockWaiter(t *testing.T) {
	srv := testenv.StartRedis(t) // no keyspace events: the waiter learns of the expiry by itself
	const name, timeout = "jobs/nightly", 2 * time.Second
	py, lines := redisPy(t, srv, name, "hold", "2")
	if !lines.Scan() || lines.Text() != "HELD" {
		t.Fatalf("redis-py holder: %q", lines.Text())
	}
	c := open(t, "redis://"+srv.Addr+"?compat=setnx", dlock.WithTTL(5*time.Second))
	in, err := c.Inspect(context.Background(), name)
	if err != nil || !strings.Contains(in.Holder.Note, "holder unknown") {
		t.Errorf("Inspect = %+v, %v; want a note saying the holder is unknown", in, err)
	}
	l := dlocktest.ForeignHolderKilled(t, c, name, timeout, func() {
		if err := py.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	})
	_ = l.Unlock(context.Background())
}

// A dlock waiter is woken when redis-py releases the lock: by the key's
// keyspace event where the server announces them, else by its poll. The
// holder's timeout (30s) is far off, and the waiter gives up after 900ms,
// before AcquireByRetry's safety poll (2s, jittered down to no less than
// 1s) would look: only the wake-up can grant it in time.
func TestDlockWaiterWakesOnRedisPyRelease(t *testing.T) {
	eachKeyspaceSetting(t, func(t *testing.T, srv *testenv.Redis, _ bool) {
		const name = "invoices:run"
		py, release, lines := redisPyStdin(t, srv, name, "release", "30")
		if !lines.Scan() || lines.Text() != "HELD" {
			t.Fatalf("redis-py holder: %q (%v)", lines.Text(), py.Wait())
		}
		c := open(t, "redis://"+srv.Addr+"?compat=setnx")
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer rdb.Close()
		ctx := testenv.Context(t, 30*time.Second)
		fence := func() int64 { n, _ := rdb.Get(ctx, "dlock:setnx:fence:"+name).Int64(); return n }
		before := fence()
		got := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 900*time.Millisecond)
			defer cancel()
			l, err := c.Mutex(name).Lock(wctx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
		// Every attempt takes a number from the fence counter: once it
		// moved, the waiter has tried, found the lock held, and waits.
		testenv.Eventually(t, 10*time.Second, "the waiter's first attempt", func() error {
			if fence() == before {
				return errors.New("not yet")
			}
			return nil
		})
		fmt.Fprintln(release)
		if !lines.Scan() || lines.Text() != "RELEASED" {
			t.Fatalf("redis-py release: %q", lines.Text())
		}
		if err := <-got; err != nil {
			t.Fatalf("the dlock waiter was not granted the lock redis-py released: %v", err)
		}
	})
}

// Open reads notify-keyspace-events: a waiter listens for the key's
// events only if the server announces deletions (g) and expiries (x) on
// keyspace channels (K), and polls otherwise.
func TestSetNXOpenDetectsKeyspaceEvents(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := testenv.Context(t, 30*time.Second)
	for flags, want := range map[string]bool{"": false, "Kgx": true, "KA": true, "Kg": false, "Egx": false, "AKE": true} {
		if err := rdb.ConfigSet(ctx, "notify-keyspace-events", flags).Err(); err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse("redis://" + srv.Addr + "?compat=setnx")
		d, err := redislock.Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.(*redislock.Driver).KeyspaceEvents(); got != want {
			t.Errorf("notify-keyspace-events %q: listens for keyspace events %v, want %v", flags, got, want)
		}
		d.Close()
	}
}

// Each side's lock excludes the other: redis-py's non-blocking acquire
// fails while dlock holds the key, and dlock's TryLock fails while
// redis-py holds it.
func TestDlockAndRedisPyExcludeEachOther(t *testing.T) {
	srv := testenv.StartRedis(t)
	const name = "reports:render"
	c := open(t, "redis://"+srv.Addr+"?compat=setnx")
	ctx := testenv.Context(t, 30*time.Second)
	l, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if redisPyTry(t, srv, name) {
		t.Fatal("redis-py acquired the lock while dlock held it")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !redisPyTry(t, srv, name) {
		t.Fatal("redis-py could not acquire the lock dlock had released")
	}

	_, lines := redisPy(t, srv, name, "hold", "30")
	if !lines.Scan() || lines.Text() != "HELD" {
		t.Fatalf("redis-py holder: %q", lines.Text())
	}
	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock while redis-py holds: %v, want ErrNotAcquired", err)
	}
	// Break deletes the key, whoever holds it.
	if err := c.Break(ctx, name); err != nil {
		t.Fatal(err)
	}
	first := l.Token()
	l, err = c.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after Break of redis-py's lock: %v", err)
	}
	// dlock's tokens keep increasing across the foreign grants between.
	if l.Token() <= first {
		t.Errorf("token %d after redis-py's grants, want more than dlock's earlier %d", l.Token(), first)
	}
	_ = l.Unlock(ctx)
}

// Without compat, dlock's locks are keys of its own: redis-py, locking the
// name, does not see them (the README says so).
func TestWithoutCompatRedisPyDoesNotSeeDlockLocks(t *testing.T) {
	srv := testenv.StartRedis(t)
	const name = "reports:render"
	c := open(t, "redis://"+srv.Addr)
	ctx := testenv.Context(t, 30*time.Second)
	l, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if !redisPyTry(t, srv, name) {
		t.Fatal("redis-py could not acquire a name dlock holds in its own layout; the README says it can")
	}
}

// List in compat=setnx: with a prefix, every held key under it, foreign
// ones too; without, the locks dlock has taken.
func TestSetNXListFindsForeignHoldersUnderPrefix(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := open(t, "redis://"+srv.Addr+"?compat=setnx")
	ctx := testenv.Context(t, 30*time.Second)
	l, err := c.Mutex("locks:mine").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	_, lines := redisPy(t, srv, "locks:theirs", "hold", "30")
	if !lines.Scan() || lines.Text() != "HELD" {
		t.Fatalf("redis-py holder: %q", lines.Text())
	}
	names := func(prefix string) string {
		infos, err := c.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		var ns []string
		for _, in := range infos {
			ns = append(ns, fmt.Sprintf("%s token=%d", in.Name, in.Token))
		}
		return strings.Join(ns, ",")
	}
	if got := names("locks:"); got != fmt.Sprintf("locks:mine token=%d,locks:theirs token=0", l.Token()) &&
		got != fmt.Sprintf("locks:theirs token=0,locks:mine token=%d", l.Token()) {
		t.Errorf("List(locks:) = %s; want locks:mine and locks:theirs", got)
	}
	if got := names(""); got != fmt.Sprintf("locks:mine token=%d", l.Token()) {
		t.Errorf("List() = %s; want only dlock's lock", got)
	}
}

// The compat parameter takes only the layouts there are; names under
// dlock's own prefix are refused, since the lock key is the name; so are
// fair waiting (there is no queue) and Redis Cluster.
func TestSetNXRefusesUnknownLayoutAndReservedNames(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t, 30*time.Second)
	_, err := dlock.Open(ctx, "redis://"+srv.Addr+"?compat=redsync")
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), `compat="redsync": want one of setnx`) {
		t.Errorf("compat=redsync: %v; want ErrInvalidOption naming setnx", err)
	}
	c := open(t, "redis://"+srv.Addr+"?compat=setnx")
	if _, err := c.Mutex("dlock:setnx:fence:x").TryLock(ctx); !errors.Is(err, dlock.ErrInvalidName) {
		t.Errorf("TryLock of a name under dlock's prefix: %v, want ErrInvalidName", err)
	}
	if _, err := c.Mutex("x", dlock.WithFair()).TryLock(ctx); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("a fair TryLock: %v, want ErrUnsupported (no queue in this layout)", err)
	}
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
	defer cluster.Close()
	if _, err := redislock.New(cluster, redislock.WithCompat("setnx")); !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "Redis Cluster") {
		t.Errorf("compat=setnx on Redis Cluster: %v, want ErrInvalidOption naming Redis Cluster", err)
	}
}
