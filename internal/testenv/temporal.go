package testenv

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TemporalInstall is the command that installs the Temporal CLI, whose
// "server start-dev" is the Temporal server the tests use.
const TemporalInstall = "scripts/install-temporal.sh (go install github.com/temporalio/cli/cmd/temporal@v1.5.1)"

// Temporal is a Temporal development server (the CLI's "server start-dev":
// frontend, history, matching and worker services in one process, state in
// a SQLite file) listening on free loopback ports.
type Temporal struct {
	// Addr is the frontend's gRPC address, host:port.
	Addr string
	// Namespace is a namespace that exists when StartTemporal returns.
	Namespace string
	// DB is the SQLite file that holds the server's state.
	DB string

	bin     string
	dir     string
	ports   [3]int   // frontend, HTTP API, metrics
	dynamic []string // dynamic config values, key=value

	mu   sync.Mutex
	proc *Process
}

// StartTemporal starts a Temporal dev server in a temporary directory and
// waits until its frontend serves the "default" namespace. The server is
// killed when the test ends. Starting takes a few seconds: share one server
// per test binary. The server runs with its default dynamic config, as a
// user's would, but for the values given as "key=value" (the CLI's
// --dynamic-config-value; the value is YAML, a number or a quoted string).
func StartTemporal(t testing.TB, dynamic ...string) *Temporal {
	t.Helper()
	home := []string{}
	if gopath, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, p := range filepath.SplitList(string(trimNL(gopath))) {
			home = append(home, filepath.Join(p, "bin"))
		}
	}
	bin := LookPath(t, "temporal", TemporalInstall, []string{"temporal"}, append(home, "/root/go/bin")...)
	dir := t.TempDir()
	s := &Temporal{
		Addr:      "",
		Namespace: "default",
		DB:        filepath.Join(dir, "temporal.sqlite"),
		bin:       bin,
		dir:       dir,
		dynamic:   dynamic,
	}
	for i := range s.ports {
		s.ports[i] = FreePort(t)
	}
	s.Addr = "127.0.0.1:" + strconv.Itoa(s.ports[0])
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

func (s *Temporal) start() error {
	args := []string{"server", "start-dev", "--headless",
		"--ip", "127.0.0.1",
		"--port", strconv.Itoa(s.ports[0]),
		"--http-port", strconv.Itoa(s.ports[1]),
		"--metrics-port", strconv.Itoa(s.ports[2]),
		"--db-filename", s.DB,
		"--log-level", "warn",
	}
	// WAL with synchronous=NORMAL: a killed server loses no committed
	// transaction (only a machine crash could), and the single SQLite
	// writer stops being the bottleneck of a busy test.
	args = append(args, "--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal")
	// The tests run with the server's defaults (among them
	// history.maxInFlightUpdates=10), as a user's server would, unless
	// they ask for other values.
	for _, kv := range s.dynamic {
		args = append(args, "--dynamic-config-value", kv)
	}
	p, err := StartProcess("temporal", exec.Command(s.bin, args...), s.dir)
	if err != nil {
		return fmt.Errorf("testenv: start temporal: %w", err)
	}
	// The CLI prints its banner once the services run and the namespaces
	// it was asked for exist.
	if err := p.WaitLog("Server:", 90*time.Second); err != nil {
		p.Kill()
		return err
	}
	if err := p.WaitTCP(s.Addr, 30*time.Second); err != nil {
		p.Kill()
		return err
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return nil
}

// Process returns the running server process.
func (s *Temporal) Process() *Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (s *Temporal) Kill() {
	if p := s.Process(); p != nil {
		p.Kill()
	}
}

// Restart stops the server (SIGKILL: a crash, not a clean shutdown) and
// starts it again on the same ports with the same SQLite file.
func (s *Temporal) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	if err := s.start(); err != nil {
		t.Fatalf("testenv: restart temporal: %v", err)
	}
}
