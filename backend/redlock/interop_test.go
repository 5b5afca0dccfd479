package redlock_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/internal/testenv"
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
