package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock/dlock"
)

// Exit statuses of dlock's own outcomes. They must not be mistaken for what
// the command run under the lock commonly returns: 1 and 2 (most commands'
// failures), 126 and 127 (the shell's "cannot execute" and "not found"), and
// 128+N (killed by signal N). 64, 69 and 75 are EX_USAGE, EX_UNAVAILABLE and
// EX_TEMPFAIL of BSD's sysexits.h, which say the same things; sysexits has
// nothing for a lost lease, so it gets 79, the first value past its range.
//
// verify and bench have no CMD: for them 1 means only "a violation was
// found", and a failure of the tool itself that no other status names
// (interrupted, a file it could not write, a worker that broke) is 70,
// EX_SOFTWARE, so that a script never reads a broken run as a verdict.
const (
	exitViolation   = 1  // verify, bench: a property was violated (checked, and failed)
	exitToolFailed  = 70 // verify, bench: the run itself failed before a verdict (EX_SOFTWARE)
	exitUsage       = 64 // a bad flag, argument, lock name or backend URL
	exitUnavailable = 69 // the backend could not be reached or failed
	exitNotAcquired = 75 // the lock was held: --no-wait, or --wait ran out
	exitOSErr       = 71 // CMD's supervisor could not be started, or was killed (as flock's EX_OSERR)
	exitLeaseLost   = 79 // the lease was lost while the command ran
)

// exitStatus is an error that carries only an exit status: the command has
// already said what happened (dlock run exiting with its CMD's status).
type exitStatus int

func (s exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(s)) }

// statusError is an error with the exit status it maps to.
type statusError struct {
	status int
	err    error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &statusError{exitUsage, fmt.Errorf(format, args...)}
}

// withStatus attaches an exit status to err.
func withStatus(status int, err error) error {
	if err == nil {
		return nil
	}
	return &statusError{status, err}
}

// checkerStatus is the error of verify and bench: a violation (already
// reported with exitViolation) stays as it is; any other failure that would
// be status 1 becomes exitToolFailed.
func checkerStatus(err error) error {
	var st exitStatus
	if err == nil || errors.As(err, &st) || statusOf(err) != 1 {
		return err
	}
	return withStatus(exitToolFailed, err)
}

// statusOf maps an error to the exit status documented in "dlock run --help".
func statusOf(err error) int {
	var se *statusError
	switch {
	case errors.As(err, &se):
		return se.status
	case errors.Is(err, dlock.ErrInvalidName), errors.Is(err, dlock.ErrInvalidOption), errors.Is(err, dlock.ErrUnsupported):
		return exitUsage
	case errors.Is(err, dlock.ErrNotAcquired):
		return exitNotAcquired
	case errors.Is(err, dlock.ErrLeaseLost):
		return exitLeaseLost
	case errors.Is(err, dlock.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return exitUnavailable
	}
	return 1
}
