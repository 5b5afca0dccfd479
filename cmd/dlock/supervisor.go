package main

// dlock run does not start CMD itself: it starts a copy of itself in a
// hidden mode, the supervisor, which starts CMD and stays its parent.
//
// Why a supervisor. The lock must not outlive dlock's ability to renew it
// while any process CMD started still runs, and that includes dlock being
// killed with SIGKILL, which dlock cannot react to. Linux's parent-death
// signal reaches only the direct child (sh), never its children, and a
// process group misses whatever left the group (setsid, daemons) and cannot
// be signalled without also hitting dlock's own group. So:
//
//   - The supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER): every
//     process CMD starts, however deep, and even after its parent died or it
//     left the group or the session, stays a descendant of the supervisor
//     until it has exited and been reaped. Its descendants in /proc are
//     exactly the processes to stop; wait4 returning ECHILD proves that none
//     is left.
//   - It learns of dlock's death from a pipe: dlock holds the only write end
//     of the control pipe, so a read returning EOF means dlock is gone, however
//     it died (a parent-death signal would be tied to the thread that forked,
//     and would have to be told apart from a signal sent by a user). It then
//     SIGKILLs every descendant until none is left, and exits.
//   - CMD runs in dlock's process group: as with flock(1), the shell's job
//     is dlock with everything CMD starts, so Ctrl-C and Ctrl-Z reach all
//     of it, and a pipeline `dlock run … | less` shares the terminal as any
//     pipeline does. The supervisor alone has a process group of its own,
//     so that what the terminal or a shell sends to the job never reaches
//     it (not even while it starts); it catches the rest.
//   - It watches dlock's state: if dlock is stopped (SIGSTOP, which dlock
//     cannot catch), it stops every descendant with SIGSTOP, and leaves them
//     stopped until dlock, running again and still holding the lease, tells
//     it to continue them.
//
// The protocol is one line per message. From dlock (file descriptor 3):
// "signal N" (send N to every descendant), "signal-outside N" (only to those
// outside the process group, which got N from the terminal already),
// "stop N" and "stop-outside N" (the same with a stop signal, then wait until
// all are stopped: answered "stopped"), "cont", and "terminate" (SIGTERM,
// then SIGKILL after the grace period, until none is left). To dlock
// (file descriptor 4): "started PID", "failed STATUS MESSAGE" (CMD could not be
// executed; 126 or 127), "exited WAITSTATUS LEFT" (CMD, the direct child,
// exited; LEFT of its descendants still run, and get "terminate"), and
// "stopped". The supervisor exits 0 once it has no descendant left.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlock/dlock/internal/procfs"
)

const superviseCmd = "_run-supervisor"

const prSetChildSubreaper = 36 // linux/prctl.h

// supervisorSignals are caught by the supervisor so that none of them stops
// or kills it; being caught (not ignored), they reach CMD with their
// default action.
var supervisorSignals = []os.Signal{
	syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGUSR2,
	syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE, syscall.SIGALRM,
}

// supervise is the hidden command "_run-supervisor GRACE CMD [ARGS...]".
func supervise(_ context.Context, _ *cmdEnv, args []string) error {
	if len(args) < 2 {
		return usageErrorf("usage: dlock %s GRACE CMD [ARGS...]", superviseCmd)
	}
	grace, err := time.ParseDuration(args[0])
	if err != nil {
		return withStatus(exitUsage, err)
	}
	argv := args[1:]
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	ctl, events := os.NewFile(3, "control"), os.NewFile(4, "events")
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", errno)
	}
	sigs := make(chan os.Signal, 16)
	for _, s := range supervisorSignals {
		if !signal.Ignored(s) { // an ignored signal (nohup) stays ignored for CMD
			signal.Notify(sigs, s)
		}
	}
	s := &supervisor{self: os.Getpid(), parent: os.Getppid(), events: events}
	if s.pgrp, err = syscall.Getpgid(s.parent); err != nil || s.parent == 1 {
		return errors.New("dlock run died before its supervisor started")
	}
	cmd, status, err := startCommand(argv, s.pgrp)
	if err != nil {
		s.send("failed %d %s", status, oneLine(err))
		return exitStatus(status)
	}
	s.send("started %d", cmd)
	s.loop(cmd, grace, ctl, sigs)
	return nil
}

// startCommand starts CMD as the supervisor's child, with its standard
// files and environment, in process group pgrp (dlock's). A supervisor
// killed outright takes CMD with it (its parent-death signal).
func startCommand(argv []string, pgrp int) (pid, status int, err error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return 0, 127, err
		}
		return 0, 126, err
	}
	pid, err = syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pgid: pgrp, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return 0, 127, fmt.Errorf("exec %s: %w", path, err)
		}
		return 0, 126, fmt.Errorf("exec %s: %w", path, err)
	}
	return pid, 0, nil
}

type supervisor struct {
	self, parent int
	pgrp         int // dlock's process group, and CMD's
	events       *os.File
	frozen       bool // every descendant got SIGSTOP because dlock was stopped
}

func (s *supervisor) send(format string, args ...any) {
	_, _ = fmt.Fprintf(s.events, format+"\n", args...)
}

// reaped is a child the supervisor reaped; pid 0 says that no child is left.
type reaped struct {
	pid int
	ws  syscall.WaitStatus
}

const (
	// parentCheckEvery is how often the supervisor looks whether dlock
	// itself was stopped (Ctrl-Z reached it, not CMD), to stop CMD's
	// processes too: a tenth of a second is below what a user notices.
	parentCheckEvery = 100 * time.Millisecond
	// killRepeat is how often SIGKILL is sent again to what is left of the
	// tree, for processes forked while the others were being killed.
	killRepeat = 20 * time.Millisecond
	// stopWait is how long stopTree gives the tree to stop on the catchable
	// signal before SIGSTOP, polling every stopPoll.
	stopWait = time.Second
	stopPoll = 5 * time.Millisecond
)

func (s *supervisor) loop(cmd int, grace time.Duration, ctl *os.File, sigs <-chan os.Signal) {
	children := make(chan reaped, 16)
	go func() {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, 0, nil)
			switch {
			case errors.Is(err, syscall.EINTR):
				continue
			case err != nil: // ECHILD: the tree is empty
				children <- reaped{}
				return
			}
			children <- reaped{pid, ws}
		}
	}()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(ctl)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines) // EOF: dlock is gone
	}()
	poll := time.NewTicker(parentCheckEvery)
	defer poll.Stop()
	var killAt, killTick <-chan time.Time
	terminate := func() {
		if killTick != nil || killAt != nil {
			return
		}
		s.signalTree(syscall.SIGTERM, false)
		s.signalTree(syscall.SIGCONT, false) // a stopped process acts on SIGTERM only once continued
		s.frozen = false
		killAt = time.After(grace)
	}
	for {
		select {
		case c := <-children:
			switch c.pid {
			case 0:
				return
			case cmd:
				left := len(s.descendants())
				s.send("exited %d %d", uint32(c.ws), left)
				if left > 0 {
					terminate()
				}
			}
		case line, ok := <-lines:
			if !ok {
				lines = nil
				killAt, killTick = nil, time.Tick(killRepeat)
				s.signalTree(syscall.SIGKILL, false)
				continue
			}
			s.command(line, terminate)
		case <-killAt:
			killAt, killTick = nil, time.Tick(killRepeat)
			s.signalTree(syscall.SIGKILL, false)
		case <-killTick:
			// Until wait4 says no child is left: a process that forked
			// while the others were killed is reparented to the supervisor.
			s.signalTree(syscall.SIGKILL, false)
		case <-poll.C:
			if st, ok := procfs.Process(s.parent); ok && st.State == 'T' && !s.frozen && killTick == nil {
				s.frozen = true
				s.signalTree(syscall.SIGSTOP, false)
			}
		case <-sigs:
			// CMD's processes got the signal too, or dlock passes it on.
		}
	}
}

// command carries out one line from dlock.
func (s *supervisor) command(line string, terminate func()) {
	verb, arg, _ := strings.Cut(line, " ")
	n, _ := strconv.Atoi(arg)
	sig := syscall.Signal(n)
	switch verb {
	case "signal", "signal-outside":
		s.signalTree(sig, verb == "signal-outside")
		if sig == syscall.SIGTERM || sig == syscall.SIGINT || sig == syscall.SIGHUP || sig == syscall.SIGQUIT {
			// A stopped process acts on a terminating signal only once
			// continued (as a shell's kill does for a stopped job).
			s.signalTree(syscall.SIGCONT, false)
			s.frozen = false
		}
	case "stop", "stop-outside":
		s.stopTree(sig, verb == "stop-outside")
		s.send("stopped")
	case "cont":
		s.frozen = false
		s.signalTree(syscall.SIGCONT, false)
	case "terminate":
		terminate()
	}
}

// descendants lists the supervisor's live descendants: with the supervisor
// a subreaper, every process started under CMD that has not exited.
func (s *supervisor) descendants() []procfs.Stat {
	procs, ok := procfs.All()
	if !ok {
		return nil
	}
	children := make(map[int][]procfs.Stat)
	for _, p := range procs {
		children[p.PPID] = append(children[p.PPID], p)
	}
	var out []procfs.Stat
	queue := []int{s.self}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if c.PID == pid {
				continue
			}
			queue = append(queue, c.PID)
			if !c.Gone() {
				out = append(out, c)
			}
		}
	}
	return out
}

// signalTree sends sig to every descendant; with outside, only to those
// that left dlock's process group.
func (s *supervisor) signalTree(sig syscall.Signal, outside bool) {
	for _, p := range s.descendants() {
		if !outside || p.PGRP != s.pgrp {
			_ = syscall.Kill(p.PID, sig)
		}
	}
}

// stopTree stops every descendant: sig (SIGTSTP, SIGTTIN or SIGTTOU) first,
// so that a program that catches it can restore the terminal and stop
// itself; SIGSTOP to those still running stopWait later.
func (s *supervisor) stopTree(sig syscall.Signal, outside bool) {
	s.signalTree(sig, outside)
	for _, force := range []bool{false, true} {
		if force {
			s.signalTree(syscall.SIGSTOP, false)
		}
		for deadline := time.Now().Add(stopWait); time.Now().Before(deadline); time.Sleep(stopPoll) {
			if s.allStopped() {
				return
			}
		}
	}
}

func (s *supervisor) allStopped() bool {
	for _, p := range s.descendants() {
		if !p.Stopped() {
			return false
		}
	}
	return true
}
