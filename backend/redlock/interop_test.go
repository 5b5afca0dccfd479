package redlock_test

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// redlockPy runs testdata/redlockpy.py (Redlock as redlock-py does it, on
// Debian's python3-redis) on name over nodes, and returns the command,
// started, with its first line of output.
func redlockPy(t *testing.T, nodes []*testenv.Redis, name, mode string, ttl time.Duration) (*exec.Cmd, string) {
	t.Helper()
	py := testenv.RequirePython(t, "python3-redis")
	script, _ := filepath.Abs("testdata/redlockpy.py")
	cmd := exec.Command(py, append([]string{script, name, mode, strconv.FormatInt(ttl.Milliseconds(), 10)}, addrs(nodes)...)...)
	lines := testenv.StartLines(t, cmd)
	lines.Scan()
	return cmd, lines.Text()
}

func openSetNX(t *testing.T, nodes []*testenv.Redis) *dlock.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dlock.Open(ctx, "redlock://"+strings.Join(addrs(nodes), ",")+"?compat=setnx", dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// On three nodes, dlock in compat=setnx and a redlock-py style client
// exclude each other; Inspect shows the foreign holder; and when that
// holder is SIGKILLed, a dlock waiter is granted the lock within the
// holder's TTL (plus a margin), not before the kill.
func TestDlockAndRedlockPyExcludeEachOther(t *testing.T) {
	nodes := startNodes(t, 3)
	c := openSetNX(t, nodes)
	ctx := testenv.Context(t, 30*time.Second)
	const name, ttl = "payments:settle", 2 * time.Second

	l, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, got := redlockPy(t, nodes, name, "try", ttl); got != "False" {
		t.Fatalf("redlock-py's attempt while dlock holds: %q, want False", got)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, got := redlockPy(t, nodes, name, "try", ttl); got != "True" {
		t.Fatalf("redlock-py's attempt after dlock released: %q, want True", got)
	}

	py, got := redlockPy(t, nodes, name, "hold", ttl)
	if got != "HELD" {
		t.Fatalf("redlock-py holder: %q", got)
	}
	if in, err := c.Inspect(ctx, name); err != nil || !strings.Contains(in.Holder.Note, "holder unknown") {
		t.Errorf("Inspect = %+v, %v; want a note saying the holder is unknown", in, err)
	}
	held := dlocktest.ForeignHolderKilled(t, c, name, ttl, func() {
		if err := py.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	})
	_ = held.Unlock(context.Background())
}

// A node restarted empty is re-seeded with the compat=setnx fence
// counters too: those of locks taken before, and that of a lock never
// taken before whose grant is between its rounds (its first round
// created the counter, so the seeding finds it and waits for the second
// round, as it does in dlock's own layout).
func TestReseedCopiesSetNXCounters(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	c := openSetNX(t, nodes)
	tok := lockUnlock(t, c, "orders:1")

	fresh := redisscript.SetNX.Keys("dlock", "orders:2")
	var direct []*redis.Client
	for _, n := range nodes[:2] {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
		t.Cleanup(func() { rdb.Close() })
		direct = append(direct, rdb)
		if r, err := fresh.AcquireRead(ctx, rdb, "between", time.Minute, nil, "dlock:fence-state"); err != nil || !r.Granted {
			t.Fatalf("first round on %s: %+v, %v", n.Addr, r, err)
		}
	}
	nodes[2].Restart()
	lockUnlock(t, c, "other") // sees n2 without counters, and re-seeds it
	testenv.Eventually(t, 30*time.Second, "the re-seed of n2 to begin", func() error {
		if s := fenceState(t, ctx, nodes[2].Addr); !strings.HasPrefix(s, "seeding ") && s != "complete" {
			return errors.New(s)
		}
		return nil
	})
	for range 30 {
		if s := fenceState(t, ctx, nodes[2].Addr); s == "complete" {
			t.Fatalf("n2 was marked complete while a grant of orders:2 was between its rounds")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, rdb := range direct {
		if ok, err := fresh.SetToken(ctx, rdb, "between", 7); err != nil || !ok {
			t.Fatalf("second round: %v, %v", ok, err)
		}
	}
	waitSeeded(t, nodes[2].Addr)
	rdb := redis.NewClient(&redis.Options{Addr: nodes[2].Addr})
	defer rdb.Close()
	for key, want := range map[string]uint64{redisscript.SetNX.Keys("dlock", "orders:1").Fence: tok, fresh.Fence: 7} {
		if got, _ := rdb.Get(ctx, key).Uint64(); got < want {
			t.Errorf("%s on the re-seeded node: %d, want >= %d", key, got, want)
		}
	}
}
