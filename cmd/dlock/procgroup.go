package main

import (
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unsafe"

	"github.com/dlock/dlock/internal/procfs"
)

// forwardedSignals are passed on by dlock run to its CMD's process group.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// processGroup is the process group of a command started with Setpgid: its
// ID is the leader's PID.
type processGroup int

// signal sends sig to every process in the group at once.
func (g processGroup) signal(sig syscall.Signal) {
	_ = syscall.Kill(-int(g), sig)
}

// alive reports whether a process of the group is still running. Zombies do
// not count: a member whose parent died waits for init to reap it, which
// some container inits never do.
func (g processGroup) alive() bool {
	if err := syscall.Kill(-int(g), 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	procs, ok := procfs.All()
	if !ok {
		return true // no /proc: trust kill(2)
	}
	for _, p := range procs {
		if !p.Gone() && p.PGRP == int(g) {
			return true
		}
	}
	return false
}

// waitStopped waits, at most timeout, until every thread of process pid is
// stopped (by SIGSTOP). kill(2) only starts a stop: until each thread has
// taken it, the others run on. Without /proc it waits 100ms and trusts
// that to be enough.
func waitStopped(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		stopped, ok := procfs.AllThreadsStopped(pid)
		if !ok {
			time.Sleep(100 * time.Millisecond)
			return true
		}
		if stopped || time.Now().After(deadline) {
			return stopped
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// stop sends SIGTERM to the group, SIGKILL after grace if any member is
// left, and waits (a bounded time) until none is. Signals that arrive
// meanwhile are passed on.
func (g processGroup) stop(grace time.Duration, sigs <-chan os.Signal) {
	g.signal(syscall.SIGTERM)
	kill := time.After(grace)
	giveUp := time.After(grace + 10*time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for g.alive() {
		select {
		case s := <-sigs:
			g.signal(s.(syscall.Signal))
		case <-kill:
			g.signal(syscall.SIGKILL)
		case <-giveUp:
			return
		case <-tick.C:
		}
	}
}

// foregroundTerminal reports whether dlock runs in the foreground of the
// terminal on its stdin; CMD's group then takes the foreground, so that it
// can read the terminal and gets Ctrl-C itself.
func foregroundTerminal() (fd int, ok bool) {
	var pgrp int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, os.Stdin.Fd(), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp)))
	if errno != 0 {
		return 0, false
	}
	return int(os.Stdin.Fd()), int(pgrp) == syscall.Getpgrp()
}

// takeTerminalBack makes dlock's group the terminal's foreground group again
// once CMD has exited. From a background group that raises SIGTTOU, ignored
// for the call.
func takeTerminalBack(fd int) {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	pgrp := int32(syscall.Getpgrp())
	_, _, _ = syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&pgrp)))
}
