package main

// The tests drive the built dlock binary as a user would: against a shared
// "dlock dev" server, and against the throwaway embedded etcd of the demos.

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/internal/procfs"
	"github.com/dlock/dlock/internal/testenv"
)

// dlockBin is the binary under test, built once by TestMain.
var dlockBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dlock-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dlockBin = filepath.Join(dir, "dlock")
	args := []string{"build", "-o", dlockBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	stopSharedDev()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is how a dlock invocation ended.
type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("exit %d after %v\nstdout:\n%s\nstderr:\n%s", r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
}

// cleanEnv is the test's environment without the variables that choose a
// backend, plus extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DLOCK_BACKEND=") && !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// dlockCmd prepares a dlock process that dies with the test binary.
func dlockCmd(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(dlockBin, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// runDlock runs dlock to completion; a run longer than two minutes fails
// the test (every path must end in bounded time).
func runDlock(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := dlockCmd(env, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("dlock %s did not end within 2 minutes\n%s\n%s", strings.Join(args, " "), out.String(), errb.String())
	}
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
		if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
			r.code = 128 + int(ws.Signal())
		}
	default:
		t.Fatal(err)
	}
	if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic:") || strings.Contains(r.stderr, "DATA RACE") {
		t.Errorf("dlock %s crashed or raced:\n%s", strings.Join(args, " "), r)
	}
	return r
}

// background is a dlock process running while the test does other things.
type background struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr bytes.Buffer
	done   chan struct{}
	res    result
}

func startDlock(t *testing.T, env []string, args ...string) *background {
	t.Helper()
	return startBackground(t, dlockCmd(env, args...))
}

// startDlockJob starts dlock in a process group of its own, as a shell
// starts a job: unlike the test's group, which may be orphaned (its
// leader's parent gone), where the kernel discards SIGTSTP.
func startDlockJob(t *testing.T, env []string, args ...string) *background {
	t.Helper()
	cmd := dlockCmd(env, args...)
	cmd.SysProcAttr.Setpgid = true
	return startBackground(t, cmd)
}

func startBackground(t *testing.T, cmd *exec.Cmd) *background {
	t.Helper()
	b := &background{cmd: cmd, done: make(chan struct{})}
	b.cmd.Stdout, b.cmd.Stderr = &b.stdout, &b.stderr
	start := time.Now()
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := b.cmd.Wait()
		b.res = result{code: b.cmd.ProcessState.ExitCode(), took: time.Since(start)}
		if ws := b.cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() {
			b.res.code = 128 + int(ws.Signal())
		}
		_ = err
		close(b.done)
	}()
	t.Cleanup(func() {
		_ = b.cmd.Process.Signal(syscall.SIGCONT)
		_ = b.cmd.Process.Kill()
		<-b.done
	})
	return b
}

func (b *background) pid() int { return b.cmd.Process.Pid }

// wait waits for the process to exit, at most two minutes.
func (b *background) wait(t *testing.T) result {
	t.Helper()
	select {
	case <-b.done:
		b.res.stdout, b.res.stderr = b.stdout.String(), b.stderr.String()
		return b.res
	case <-time.After(2 * time.Minute):
		t.Fatalf("dlock (pid %d) did not exit within 2 minutes\n%s", b.pid(), b.stderr.String())
	}
	return result{}
}

// devServer is a running "dlock dev".
type devServer struct {
	xdg  string // its XDG_RUNTIME_DIR, where it announces its URL
	url  string
	proc *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// env is the environment in which dlock finds this server by itself.
func (d *devServer) env(extra ...string) []string {
	return cleanEnv(append([]string{"XDG_RUNTIME_DIR=" + d.xdg}, extra...)...)
}

// startDev runs "dlock dev" with its announcement in xdg and its data in
// dataDir, and returns once it has announced its URL.
func startDev(xdg, dataDir string, port int) (*devServer, error) {
	d, err := startDevIn(cleanEnv("XDG_RUNTIME_DIR="+xdg), filepath.Join(xdg, "dlock", "dev.url"), "--data-dir", dataDir, "--listen", fmt.Sprintf("127.0.0.1:%d", port))
	if d != nil {
		d.xdg = xdg
	}
	return d, err
}

// startDevIn runs "dlock dev args…" in env and returns once it has
// announced its URL in announce.
func startDevIn(env []string, announce string, args ...string) (*devServer, error) {
	d := &devServer{out: &lockedBuffer{}, done: make(chan struct{})}
	d.proc = dlockCmd(env, append([]string{"dev"}, args...)...)
	d.proc.Stdout, d.proc.Stderr = d.out, d.out
	if err := d.proc.Start(); err != nil {
		return nil, err
	}
	go func() { _ = d.proc.Wait(); close(d.done) }()
	exited := false
	err := testenv.Poll(90*time.Second, func() error {
		if b, err := os.ReadFile(announce); err == nil {
			if a, ok := parseDevFile(b); ok && a.pid == d.proc.Process.Pid {
				d.url = a.url
				return nil
			}
		}
		select {
		case <-d.done:
			exited = true
			return testenv.Final(fmt.Errorf("dlock dev exited: %s", d.out.String()))
		default:
			return errors.New("not announced")
		}
	})
	switch {
	case err == nil:
		return d, nil
	case exited:
		return nil, err
	}
	d.stop()
	return nil, fmt.Errorf("dlock dev did not announce itself in %s within 90s: %s", announce, d.out.String())
}

// stop interrupts the server (as Ctrl-C does) and waits for it to exit.
func (d *devServer) stop() {
	_ = d.proc.Process.Signal(os.Interrupt)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		_ = d.proc.Process.Kill()
		<-d.done
	}
}

var (
	devOnce   sync.Once
	sharedSrv *devServer
	devErr    error
	devDir    string
)

// sharedDev is the "dlock dev" server that the tests of this binary share.
func sharedDev(t *testing.T) *devServer {
	t.Helper()
	devOnce.Do(func() {
		devDir, devErr = os.MkdirTemp("", "dlock-dev-test-")
		if devErr == nil {
			sharedSrv, devErr = startDev(filepath.Join(devDir, "run"), filepath.Join(devDir, "data"), testenv.FreePort(t))
		}
	})
	if devErr != nil {
		t.Fatal(devErr)
	}
	return sharedSrv
}

func stopSharedDev() {
	if sharedSrv != nil {
		sharedSrv.stop()
	}
	if devDir != "" {
		os.RemoveAll(devDir)
	}
}

// lockView is the output of "dlock inspect --json", decoded for tests:
// a null becomes the zero value (a nil Holder when free).
type lockView struct {
	Schema           int
	Name             string
	Held             bool
	Token            uint64
	Holder           *dlock.Holder
	ExpiresInSeconds *float64 `json:"expires_in_seconds"`
	Waiters          []dlock.Holder
	Limit            *int
	Permits          []permitView
}

// permitView is one holder of a semaphore in "dlock inspect --json".
type permitView struct {
	Token            uint64
	Holder           dlock.Holder
	Limit            *int
	ExpiresInSeconds *float64 `json:"expires_in_seconds"`
}

// lockState is "dlock inspect --json NAME".
func lockState(t *testing.T, env []string, name string) lockView {
	t.Helper()
	r := runDlock(t, env, "inspect", "--json", name)
	if r.code != 0 {
		t.Fatalf("inspect %s: %s", name, r)
	}
	var j lockView
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		t.Fatalf("inspect --json output: %v\n%s", err, r.stdout)
	}
	return j
}

// waitHeld waits until name is held (by the holder with pid, if not 0).
func waitHeld(t *testing.T, env []string, name string, pid int) lockView {
	t.Helper()
	var j lockView
	testenv.Eventually(t, time.Minute, fmt.Sprintf("%q to be held (by pid %d, if not 0)", name, pid), func() error {
		j = lockState(t, env, name)
		switch {
		case !j.Held:
			return errors.New("free")
		case pid != 0 && j.Holder.PID != pid:
			return fmt.Errorf("held by pid %d", j.Holder.PID)
		}
		return nil
	})
	return j
}

// waitWaiters waits until name has n waiters.
func waitWaiters(t *testing.T, env []string, name string, n int) {
	t.Helper()
	testenv.Eventually(t, time.Minute, fmt.Sprintf("%d waiters on %q", n, name), func() error {
		if got := len(lockState(t, env, name).Waiters); got != n {
			return fmt.Errorf("%d waiters", got)
		}
		return nil
	})
}

// waitFile waits until path holds a line, and returns it.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	var line string
	testenv.Eventually(t, time.Minute, "a line in "+path, func() error {
		b, err := os.ReadFile(path)
		if err == nil && !bytes.HasSuffix(b, []byte("\n")) {
			err = fmt.Errorf("%q so far", b)
		}
		line = strings.TrimSpace(string(b))
		return err
	})
	return line
}

// pidFromFile reads a PID that a test's CMD wrote, and makes sure the
// process is killed when the test ends whatever happens.
func pidFromFile(t *testing.T, path string) int {
	t.Helper()
	pid, err := strconv.Atoi(waitFile(t, path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// running reports whether pid is a live process (not a zombie).
func running(pid int) bool {
	st, ok := procfs.Process(pid)
	return ok && !st.Gone()
}

// waitGone waits (a bounded time) until pid no longer runs.
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%s (pid %d) to end", what, pid), func() error {
		if running(pid) {
			return errors.New("it still runs")
		}
		return nil
	})
}
