package main

// dlock run on a terminal, as a shell user drives it: Ctrl-C, Ctrl-Z and
// fg, a pipeline into a pager. Each test runs bash on a pseudo-terminal
// that the test opens, and types into it.

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/dlock/dlock/internal/procfs"
	"github.com/dlock/dlock/internal/testenv"
)

// terminal is a shell running on a pseudo-terminal.
type terminal struct {
	t      *testing.T
	master *os.File
	cmd    *exec.Cmd
	out    lockedBuffer
	seen   int // expect looks at output after this offset
	done   chan struct{}
}

func ioctl(fd uintptr, req uint, arg unsafe.Pointer) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, uintptr(req), uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

// startTerminal runs argv as the session leader of a new pseudo-terminal,
// which is its controlling terminal, 24x80.
func startTerminal(t *testing.T, env []string, argv ...string) *terminal {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var unlock int32
	var n uint32
	if err := ioctl(master.Fd(), syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		t.Fatal(err)
	}
	if err := ioctl(master.Fd(), syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		t.Fatal(err)
	}
	ws := [4]uint16{24, 80, 0, 0}
	if err := ioctl(master.Fd(), syscall.TIOCSWINSZ, unsafe.Pointer(&ws)); err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	term := &terminal{t: t, master: master, done: make(chan struct{})}
	term.cmd = exec.Command(argv[0], argv[1:]...)
	term.cmd.Env = env
	term.cmd.Stdin, term.cmd.Stdout, term.cmd.Stderr = slave, slave, slave
	term.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
	if err := term.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	go func() { _, _ = io.Copy(&term.out, master) }()
	go func() { _ = term.cmd.Wait(); close(term.done) }()
	t.Cleanup(func() {
		master.Close() // a hangup: the shell and its jobs get SIGHUP
		select {
		case <-term.done:
		case <-time.After(10 * time.Second):
			_ = term.cmd.Process.Kill()
			<-term.done
		}
		if t.Failed() {
			t.Logf("terminal output:\n%s", term.out.String())
		}
	})
	return term
}

// interactiveBash is bash with job control on a new terminal.
func interactiveBash(t *testing.T, env []string) *terminal {
	t.Helper()
	term := startTerminal(t, append(env, "PS1=$ ", "TERM=xterm", "LESSHISTFILE=-", "LESS="), "bash", "--norc", "--noprofile", "-i")
	term.typeLine(`echo "ready$((6*7))"`)
	term.expect(`ready42`)
	return term
}

func (term *terminal) typeLine(s string) { term.send(s + "\n") }

// wait waits, at most a minute, until the terminal's first process exits,
// and returns how it ended.
func (term *terminal) wait() *os.ProcessState {
	term.t.Helper()
	select {
	case <-term.done:
	case <-time.After(time.Minute):
		term.t.Fatalf("%v did not exit within a minute:\n%s", term.cmd.Args, term.out.String())
	}
	return term.cmd.ProcessState
}

func (term *terminal) send(s string) {
	if _, err := term.master.WriteString(s); err != nil {
		term.t.Fatal(err)
	}
}

// expect waits, at most a minute, until output after the previous match
// matches re, and returns the match.
func (term *terminal) expect(re string) string {
	term.t.Helper()
	rx := regexp.MustCompile(re)
	var m string
	testenv.Eventually(term.t, time.Minute, fmt.Sprintf("the terminal to show %q", re), func() error {
		out := term.out.String()
		loc := rx.FindStringIndex(out[term.seen:])
		if loc == nil {
			return fmt.Errorf("after the last match it shows:\n%q", out[term.seen:])
		}
		m = out[term.seen+loc[0] : term.seen+loc[1]]
		term.seen += loc[1]
		return nil
	})
	return m
}

// waitState waits (a bounded time) until each process is stopped (or each
// is not, with stopped false).
func waitState(t *testing.T, stopped bool, what string, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%s: pid %d stopped: %v", what, pid, stopped), func() error {
			st, ok := procfs.Process(pid)
			if !ok || st.Gone() {
				t.Fatalf("%s: pid %d is gone", what, pid)
			}
			if (st.State == 'T') != stopped {
				return fmt.Errorf("state %c", st.State)
			}
			return nil
		})
	}
}

func TestRunCtrlCStopsTheScriptAroundIt(t *testing.T) {
	dev := sharedDev(t)
	script := `for i in 1 2 3; do "$DLOCK" run "$NAME" -- sleep 60; echo "after $i"; done; echo "loop finished"`
	term := startTerminal(t, dev.env("DLOCK="+dlockBin, "NAME="+t.Name()), "bash", "--norc", "--noprofile", "-c", script)
	waitHeld(t, dev.env(), t.Name(), 0)
	term.send("\x03")
	ws := term.wait().Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGINT || strings.Contains(term.out.String(), "after") {
		t.Errorf("Ctrl-C during dlock run in a script: the script ended with %v and printed %q; want it killed by SIGINT before its next step", term.cmd.ProcessState, term.out.String())
	}
	if j := lockState(t, dev.env(), t.Name()); j.Held {
		t.Errorf("%q still held after Ctrl-C: %+v", t.Name(), j)
	}
}

func TestRunCtrlZStopsTheWholeJobAndFgResumesIt(t *testing.T) {
	dev := sharedDev(t)
	dir := t.TempDir()
	term := interactiveBash(t, dev.env("D="+dlockBin, "DIR="+dir, "NAME="+t.Name()))
	term.typeLine(`$D run "$NAME" -- sh -c 'echo $$ > "$0/sh.pid"; sleep 400 & echo $! > "$0/gc.pid"; wait' "$DIR"`)
	sh := pidFromFile(t, filepath.Join(dir, "sh.pid"))
	gc := pidFromFile(t, filepath.Join(dir, "gc.pid"))
	held := waitHeld(t, dev.env(), t.Name(), 0)
	dlockPID := held.Holder.PID

	term.send("\x1a") // Ctrl-Z
	term.expect(`Stopped`)
	waitState(t, true, "after Ctrl-Z, dlock, CMD and its child", dlockPID, sh, gc)
	term.typeLine(`echo "prompt$((6*7))"`)
	term.expect(`prompt42`)

	term.typeLine("fg")
	waitState(t, false, "after fg, dlock, CMD and its child", dlockPID, sh, gc)
	if j := lockState(t, dev.env(), t.Name()); j.Token != held.Token || j.Holder.PID != dlockPID {
		t.Errorf("after Ctrl-Z and fg the lock is %+v; want it still held with token %d by pid %d", j, held.Token, dlockPID)
	}

	term.send("\x03") // Ctrl-C: sh dies of it; the sleep it left is stopped by dlock
	term.typeLine(`echo "status=$?"`)
	if got := term.expect(`status=\d+`); got != "status=130" {
		t.Errorf("dlock run ended by Ctrl-C: %s; want status=130", got)
	}
	waitGone(t, gc, "the child CMD left running")
	if j := lockState(t, dev.env(), t.Name()); j.Held {
		t.Errorf("%q still held after Ctrl-C: %+v", t.Name(), j)
	}
}

func TestRunPipelineIntoPagerSharesTheTerminal(t *testing.T) {
	dev := sharedDev(t)
	term := interactiveBash(t, dev.env("D="+dlockBin, "NAME="+t.Name()))
	term.typeLine(`$D run "$NAME" -- seq 7001 300000 | less`)
	held := waitHeld(t, dev.env(), t.Name(), 0)
	term.expect(`7010`) // less shows the first page: it has the terminal
	if st, ok := procfs.Process(held.Holder.PID); !ok || st.Stopped() {
		t.Errorf("dlock (pid %d) is stopped or gone while less shows its output: %+v", held.Holder.PID, st)
	}
	term.send("q")
	term.typeLine(`echo "status=${PIPESTATUS[*]}"`)
	// seq dies of SIGPIPE when less quits; dlock dies of it too.
	if got := term.expect(`status=[\d ]+`); got != fmt.Sprintf("status=%d 0", 128+int(syscall.SIGPIPE)) {
		t.Errorf("dlock run … | less, quit with q: %s; want status=141 0", got)
	}
	if j := lockState(t, dev.env(), t.Name()); j.Held {
		t.Errorf("%q still held after the pipeline ended: %+v", t.Name(), j)
	}
}
