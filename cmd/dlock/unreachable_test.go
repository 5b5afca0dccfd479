package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dlock/dlock/internal/testenv"
)

// TestUnreachableBackendIsOneLineNamingBackendAndAddress runs "dlock run"
// against every backend at an address where nothing listens, with a
// --timeout shorter than ZooKeeper's session timeout and etcd's dial
// timeout: each must exit with the unavailable status and print one line
// that names the URL and says the connection was refused — not the engine
// client's own log lines first, and not a timeout.
func TestUnreachableBackendIsOneLineNamingBackendAndAddress(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) // nothing listens there
	env := cleanEnv("XDG_RUNTIME_DIR=" + t.TempDir())
	for _, u := range []string{
		"etcd://" + addr,
		"redis://" + addr + "/0",
		"rediss://" + addr + "/0",
		"redlock://" + addr + "," + addr + "," + addr,
		"zk://" + addr,
		"postgres://u@" + addr + "/db",
		"mysql://u@" + addr + "/db",
		"temporal://" + addr + "/default",
	} {
		t.Run(u, func(t *testing.T) {
			t.Parallel()
			r := runDlock(t, env, "run", "--timeout", "4s", "--backend", u, "x", "--", "true")
			if r.code != exitUnavailable {
				t.Errorf("status %d, want %d\n%s", r.code, exitUnavailable, r)
			}
			line := strings.TrimSuffix(r.stderr, "\n")
			if strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(line, "dlock run: backend "+u+" ") ||
				!strings.Contains(line, "connection refused") || strings.Contains(line, "in time") {
				t.Errorf("stderr = %q; want one line that names %s and says the connection was refused", r.stderr, u)
			}
		})
	}
}
