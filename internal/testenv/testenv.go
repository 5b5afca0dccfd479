package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/procfs"
)

// Required reports whether a missing dependency named what must fail the
// test rather than skip it. DLOCK_REQUIRE is "all" or a comma-separated list
// of names (etcd, redis, zookeeper, postgres, mariadb, temporal, …).
func Required(what string) bool {
	v := os.Getenv("DLOCK_REQUIRE")
	if v == "" {
		return false
	}
	for _, w := range strings.Split(v, ",") {
		w = strings.TrimSpace(w)
		if w == "all" || strings.EqualFold(w, what) {
			return true
		}
	}
	return false
}

// Missing stops the test because dependency what is not available: a skip
// that names the install command, or a failure under DLOCK_REQUIRE.
func Missing(t testing.TB, what, install string, cause error) {
	t.Helper()
	msg := fmt.Sprintf("%s is not available (%v); install it with: %s", what, cause, install)
	if Required(what) {
		t.Fatalf("DLOCK_REQUIRE=%s: %s", os.Getenv("DLOCK_REQUIRE"), msg)
	}
	t.Skip(msg)
}

// LookPath finds a server binary on PATH or in extra directories (Debian
// puts some outside PATH), or stops the test with Missing.
func LookPath(t testing.TB, what, install string, names []string, extraDirs ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
		for _, d := range extraDirs {
			matches, _ := filepath.Glob(filepath.Join(d, n))
			for i := len(matches) - 1; i >= 0; i-- {
				if fi, err := os.Stat(matches[i]); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
					return matches[i]
				}
			}
		}
	}
	Missing(t, what, install, fmt.Errorf("none of %v found", names))
	return ""
}

var portMu sync.Mutex
var portsGiven = map[int]bool{}

// lowestPort is the bottom of the range FreePort picks from.
const lowestPort = 15000

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// has not been handed out before in this process.
//
// The port comes from below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), never from it: a port the kernel hands
// out for ":0" is one it also picks as the local port of outgoing
// connections, so between FreePort's check and the server's bind, any
// client connecting anywhere could take it ("bind: address already in
// use"). Below the range only another listener can, and the start is
// random so that test binaries running side by side rarely try the same
// port.
func FreePort(t testing.TB) int {
	t.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	lo, hi := lowestPort, ephemeralLow()
	if hi-lo < 1000 {
		return freeEphemeralPort(t)
	}
	if p := freePortIn(lo, hi, lo+rand.IntN(hi-lo)); p != 0 {
		return p
	}
	t.Fatalf("testenv: no free port in %d–%d", lo, hi-1)
	return 0
}

// freePortIn returns the first port of [lo, hi), going round from start,
// that was not handed out before and that 127.0.0.1 can listen on, or 0.
// portMu must be held.
func freePortIn(lo, hi, start int) int {
	for i := range hi - lo {
		p := lo + (start-lo+i)%(hi-lo)
		if portsGiven[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		portsGiven[p] = true
		return p
	}
	return 0
}

// ephemeralLow is the first port of the kernel's ephemeral range, 32768
// when it cannot be read (Linux's default).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}

// freeEphemeralPort is FreePort on a machine whose ephemeral range leaves
// too few ports below it: the kernel picks, and the race above remains.
func freeEphemeralPort(t testing.TB) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testenv: no free port: %v", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !portsGiven[p] {
			portsGiven[p] = true
			return p
		}
	}
	t.Fatal("testenv: no fresh free port after 100 tries")
	return 0
}

// Process is a server started for a test, in its own process group.
type Process struct {
	Name string
	Cmd  *exec.Cmd
	Log  string // path of the file that holds its stdout and stderr

	mu     sync.Mutex
	exited chan struct{}
	err    error
}

// Start runs cmd as a server named name, with its output in a log file in
// the test's temp dir. The process (and its group) is killed when the test
// ends, and also if the test binary dies first (parent-death signal).
func Start(t testing.TB, name string, cmd *exec.Cmd) *Process {
	t.Helper()
	p, err := StartProcess(name, cmd, t.TempDir())
	if err != nil {
		t.Fatalf("testenv: start %s: %v", name, err)
	}
	t.Cleanup(p.Kill)
	return p
}

// StartProcess is Start without a test: the caller must call Kill.
func StartProcess(name string, cmd *exec.Cmd, logDir string) (*Process, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p := &Process{Name: name, Cmd: cmd, Log: logPath, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.exited)
	}()
	return p, nil
}

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// signalGroup sends sig to the process's whole group, by PID.
func (p *Process) signalGroup(sig syscall.Signal) {
	if p.Cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-p.Cmd.Process.Pid, sig)
}

// Kill stops the process group with SIGKILL and waits for it to exit.
func (p *Process) Kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.signalGroup(syscall.SIGCONT) // a paused process must not keep a port half-open
	p.signalGroup(syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
	}
}

// Stop asks the process to exit (SIGTERM) and kills it after grace.
func (p *Process) Stop(grace time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	p.signalGroup(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.Kill()
	}
}

// childPIDs returns the processes whose parent is pid, from /proc.
func childPIDs(pid int) []int {
	procs, _ := procfs.All()
	var kids []int
	for _, p := range procs {
		if p.PPID == pid {
			kids = append(kids, p.PID)
		}
	}
	return kids
}

// waitGone waits, at most timeout, until process pid has exited (it may
// remain a zombie until its new parent reaps it: it holds nothing then).
func waitGone(pid int, timeout time.Duration) {
	_ = Poll(timeout, func() error {
		if st, ok := procfs.Process(pid); ok && !st.Gone() {
			return errors.New("running")
		}
		return nil
	})
}

// Pause freezes the process group (SIGSTOP); Resume thaws it.
func (p *Process) Pause() { p.signalGroup(syscall.SIGSTOP) }

// Resume thaws a paused server (SIGCONT).
func (p *Process) Resume() { p.signalGroup(syscall.SIGCONT) }

// Tail returns the last n lines of the process's log, for failure messages.
func (p *Process) Tail(n int) string {
	b, _ := os.ReadFile(p.Log)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// WaitTCP waits until addr accepts TCP connections, the process exits, or
// timeout passes.
func (p *Process) WaitTCP(addr string, timeout time.Duration) error {
	exited := false
	err := Poll(timeout, func() error {
		select {
		case <-p.exited:
			exited = true
			return Final(fmt.Errorf("%s exited before listening on %s: %v\n%s", p.Name, addr, p.err, p.Tail(20)))
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err == nil || exited {
		return err
	}
	return fmt.Errorf("%s did not listen on %s within %v: %v\n%s", p.Name, addr, timeout, err, p.Tail(20))
}

// WaitLog waits until the process's log contains substr.
func (p *Process) WaitLog(substr string, timeout time.Duration) error {
	exited := false
	err := Poll(timeout, func() error {
		if f, err := os.Open(p.Log); err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				if strings.Contains(sc.Text(), substr) {
					return nil
				}
			}
		}
		select {
		case <-p.exited:
			exited = true
			return Final(fmt.Errorf("%s exited before logging %q\n%s", p.Name, substr, p.Tail(20)))
		default:
			return errors.New("not logged yet")
		}
	})
	if err == nil || exited {
		return err
	}
	return fmt.Errorf("%s: timed out waiting for log line %q\n%s", p.Name, substr, p.Tail(20))
}

// Eventually waits until cond returns nil, calling it again and again (10ms
// apart at first, backing off to 100ms), and fails the test if that has
// not happened within timeout, with a message that says what was awaited
// (what, as in "waiting for <what>") and cond's last error, which should
// say what it saw instead.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Poll(timeout, cond); err != nil {
		t.Fatalf("still waiting for %s after %v: %v", what, timeout, err)
	}
}

// pollBackoff paces Poll.
var pollBackoff = driver.Backoff{Base: 10 * time.Millisecond, Cap: 100 * time.Millisecond}

// Poll calls cond until it returns nil or timeout has passed; it returns
// nil, or cond's last error. A cond that returns Final(err) stops it at
// once. Eventually is Poll for a test; Poll is for helpers that report
// failure their own way.
func Poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for n := 0; ; n++ {
		err := cond()
		if err == nil {
			return nil
		}
		var f final
		if errors.As(err, &f) {
			return f.error
		}
		if !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(min(pollBackoff.Delay(n), max(time.Until(deadline), 0)))
	}
}

// Final marks err as the end of a Poll or Eventually: what it waits for
// can no longer come (the server exited, a goroutine returned).
func Final(err error) error { return final{err} }

type final struct{ error }

func (f final) Unwrap() error { return f.error }

// Context returns a context that ends after d, or when the test ends.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// WantUnavailable checks the error a call to a frozen backend returned:
// the call must have come back while ctx, the caller's context, was still
// live (the backend's own bound ended it, not the caller), with an error
// wrapping driver.ErrUnavailable.
func WantUnavailable(t testing.TB, ctx context.Context, what string, err error) {
	t.Helper()
	if ctx.Err() != nil {
		t.Fatalf("%s returned only when the caller's context ended: %v", what, err)
	}
	if !errors.Is(err, driver.ErrUnavailable) {
		t.Errorf("%s on a frozen server: %v, want ErrUnavailable", what, err)
	}
}

// WaitAcross runs wait (a blocking acquire) in a goroutine, checks that
// it has not returned before kill (which frees what it waits for: kills a
// foreign holder), calls kill, and returns wait's error and how long
// after kill it returned.
func WaitAcross(t testing.TB, wait func() error, kill func()) (time.Duration, error) {
	t.Helper()
	type result struct {
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		err := wait()
		got <- result{err, time.Now()}
	}()
	select {
	case r := <-got:
		t.Fatalf("the wait returned before the kill: %v", r.err)
	default:
	}
	killed := time.Now()
	kill()
	r := <-got
	return r.at.Sub(killed), r.err
}
