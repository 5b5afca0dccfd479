package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"
	"unsafe"

	"github.com/dlock/dlock/internal/procfs"
)

// forwardedSignals are passed on by dlock run to every process of its CMD;
// while dlock waits for the lock, they abandon the wait.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// jobControlSignals are handled by dlock run once CMD runs: a stop signal
// stops CMD's processes before dlock, SIGCONT continues them.
var jobControlSignals = []os.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGCONT}

// notify is signal.Notify for the signals that were not ignored when dlock
// started: a signal ignored by the caller (nohup, a background job of a
// script) stays ignored, by dlock and by CMD, which inherits it.
func notify(c chan<- os.Signal, sigs ...os.Signal) {
	for _, s := range sigs {
		if !signal.Ignored(s) {
			signal.Notify(c, s)
		}
	}
}

// foregroundOnTerminal reports whether dlock's process group is the
// foreground group of its controlling terminal: a SIGINT, SIGQUIT or
// SIGTSTP it gets then came, most likely, from the keyboard, to the whole
// group, CMD's processes included.
func foregroundOnTerminal() bool {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return false // no controlling terminal
	}
	defer tty.Close()
	var pgrp int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, tty.Fd(), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp)))
	return errno == 0 && int(pgrp) == syscall.Getpgrp()
}

// setDisposition sets the kernel's action for sig to act (a struct
// sigaction, opaque here) and returns the previous one. A zero act is
// SIG_DFL with no flags and an empty mask on every 64-bit Linux.
func setDisposition(sig syscall.Signal, act *[4]uint64) (old [4]uint64) {
	_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(act)), uintptr(unsafe.Pointer(&old)), 8, 0, 0)
	return old
}

// stopSelf stops dlock with the stop signal sig, as if it had not caught
// it, so that the shell sees its job stopped; it returns once dlock is
// continued. In an orphaned process group, the kernel discards the signal
// and stopSelf returns at once.
func stopSelf(sig syscall.Signal) {
	var dfl [4]uint64
	old := setDisposition(sig, &dfl)
	_ = syscall.Kill(os.Getpid(), sig)
	setDisposition(sig, &old)
}

// dieOf ends dlock by sig, with the signal's default action, as a shell
// does when its child died of a signal: a script that runs dlock then
// stops on Ctrl-C, just as it would had it run CMD itself. Core dumps are
// turned off first. It returns only if sig does not kill (SIGCHLD, say).
func dieOf(sig syscall.Signal) {
	signal.Reset(sig)
	_ = syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
	var dfl [4]uint64
	setDisposition(sig, &dfl)
	_ = syscall.Kill(os.Getpid(), sig)
	time.Sleep(signalBound) // the signal is delivered before Kill returns; this is a bound
}

// waitStopped waits, at most timeout, until every thread of process pid is
// stopped (by SIGSTOP). kill(2) only starts a stop: until each thread has
// taken it, the others run on. Without /proc it waits 100ms and trusts
// that (signalBound) to be enough.
func waitStopped(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		stopped, ok := procfs.AllThreadsStopped(pid)
		if !ok {
			time.Sleep(signalBound)
			return true
		}
		if stopped || time.Now().After(deadline) {
			return stopped
		}
		time.Sleep(threadStopPoll)
	}
}

const (
	// signalBound is how long dlock trusts a signal it sent to take effect
	// where it cannot look (no /proc): delivery takes microseconds, so a
	// tenth of a second is ample.
	signalBound = 100 * time.Millisecond
	// threadStopPoll is how often waitStopped looks at the threads: a
	// stop takes effect within a scheduler tick.
	threadStopPoll = 2 * time.Millisecond
)
