package dlocktest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock"
)

// Environment of a lock-holding child process.
const (
	envChildURL  = "DLOCKTEST_CHILD_URL"
	envChildName = "DLOCKTEST_CHILD_NAME"
	envChildTTL  = "DLOCKTEST_CHILD_TTL"
	envChildN    = "DLOCKTEST_CHILD_PERMITS"
	envChildKind = "DLOCKTEST_CHILD_KIND" // "", "reader" or "leader"
)

// What a lock-holding child process takes (envChildKind).
const (
	childPermit = ""       // a permit of a semaphore (of one: a mutex)
	childReader = "reader" // a reader's lease of a read-write lock
	childLeader = "leader" // the leadership of an election, with value childValue
	childValue  = "crashed-leader"
)

// A worker process: the test binary started by WorkerCommand.
const (
	envWorker     = "DLOCKTEST_WORKER"      // the worker's name
	envWorkerArgs = "DLOCKTEST_WORKER_ARGS" // its arguments, a JSON array
)

var workers = map[string]func(args []string) int{}

// Worker registers run as the worker name, which WorkerCommand starts in
// a process of its own (a mixed-fleet test's dlock or foreign-library
// workers): call it from the test package's init. run gets the arguments
// given to WorkerCommand and returns the process's exit status.
func Worker(name string, run func(args []string) int) { workers[name] = run }

// WorkerCommand returns the command that runs the worker name (see
// Worker) with args: the test binary again, whose TestMain must be Main.
func WorkerCommand(name string, args ...string) *exec.Cmd {
	b, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorker+"="+name, envWorkerArgs+"="+string(b))
	return cmd
}

func runWorker(name string) int {
	var args []string
	run, ok := workers[name]
	if err := json.Unmarshal([]byte(os.Getenv(envWorkerArgs)), &args); err != nil || !ok {
		fmt.Printf("ERROR worker %q (registered: %v): %v\n", name, ok, err)
		return 2
	}
	return run(args)
}

// Main is the TestMain of a backend's test package:
//
//	func TestMain(m *testing.M) { dlocktest.Main(m) }
//
// When the suite has started the test binary as a child process, Main takes
// the lock it was told to, prints its token, and holds it until killed; as
// a worker (WorkerCommand), it runs the worker; otherwise it runs the
// tests.
func Main(m *testing.M) {
	if name := os.Getenv(envWorker); name != "" {
		os.Exit(runWorker(name))
	}
	if os.Getenv(envChildURL) != "" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}

func runChild() int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ttl, err := time.ParseDuration(os.Getenv(envChildTTL))
	if err != nil {
		fmt.Println("ERROR bad TTL:", err)
		return 2
	}
	c, err := dlock.Open(ctx, os.Getenv(envChildURL))
	if err != nil {
		fmt.Println("ERROR", err)
		return 2
	}
	n, _ := strconv.Atoi(os.Getenv(envChildN))
	name := os.Getenv(envChildName)
	var l *dlock.Lease
	switch os.Getenv(envChildKind) {
	case childReader:
		l, err = c.RWMutex(name, dlock.WithTTL(ttl)).RLock(ctx)
	case childLeader:
		l, err = c.Election(name, dlock.WithTTL(ttl)).Campaign(ctx, childValue)
	default:
		l, err = c.Semaphore(name, max(n, 1), dlock.WithTTL(ttl)).Acquire(ctx)
	}
	if err != nil {
		fmt.Println("ERROR", err)
		return 2
	}
	fmt.Printf("TOKEN %d\n", l.Token())
	// Hold (and renew) until killed; a bound so that no child outlives a
	// broken test run by much.
	select {
	case <-l.Done():
		fmt.Println("LOST", l.Err())
		return 3
	case <-time.After(2 * time.Minute):
		return 4
	}
}

// StartHolder runs the test binary as a child process that opens url,
// takes the lock name with the given TTL and holds it, renewing, until it
// is killed (or for at most two minutes); it returns once the child has
// reported its token. The test package's TestMain must be Main. Tests of a
// crash use it: kill the child with SIGKILL and watch what the backend does
// with its lock.
func StartHolder(t *testing.T, url, name string, ttl time.Duration) (*exec.Cmd, uint64) {
	t.Helper()
	return StartPermitHolder(t, url, name, 1, ttl)
}

// StartPermitHolder is StartHolder for a permit of the semaphore name of
// n permits.
func StartPermitHolder(t *testing.T, url, name string, n int, ttl time.Duration) (*exec.Cmd, uint64) {
	t.Helper()
	return startChild(t, url, name, childPermit, n, ttl)
}

// startChild starts a child process that takes kind of lease of name.
func startChild(t *testing.T, url, name, kind string, n int, ttl time.Duration) (*exec.Cmd, uint64) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChildURL+"="+url, envChildName+"="+name, envChildTTL+"="+ttl.String(), envChildN+"="+strconv.Itoa(n), envChildKind+"="+kind)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start holder process: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		var acc strings.Builder
		for {
			n, err := out.Read(buf)
			acc.Write(buf[:n])
			if i := strings.IndexByte(acc.String(), '\n'); i >= 0 {
				lines <- acc.String()[:i]
				return
			}
			if err != nil {
				lines <- acc.String()
				return
			}
		}
	}()
	select {
	case line := <-lines:
		var tok uint64
		if _, err := fmt.Sscanf(line, "TOKEN %d", &tok); err != nil {
			t.Fatalf("holder process: %q", line)
		}
		return cmd, tok
	case <-time.After(40 * time.Second):
		t.Fatal("holder process did not report a token within 40s")
	}
	return nil, 0
}
