package driver

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Classify turns the error of an operation a backend made for a caller
// into one the contract allows. ctx is the caller's context (not a
// shorter one the backend derived from it to bound a call); what names
// the operation and the server ("etcd put", "redis 10.0.0.1:6379"), never
// a password. It is the one rule every backend applies, and the portable
// layer applies it again to what a driver returns, which changes nothing
// in an error Classify made:
//
//   - nil stays nil.
//   - An answer — err carries ErrNotAcquired, ErrLeaseLost, ErrNotHeld,
//     ErrInvalidName or ErrUnsupported — is returned as it is, even if ctx
//     ended meanwhile: the engine answered, and the caller must learn, say,
//     that its lease was lost.
//   - When ctx has ended (or its deadline has passed, which a dial that
//     took the deadline as its own can notice a moment before ctx does),
//     the result is ctx's error: the caller stopped waiting, so whatever
//     failed — a cancelled call, a closed connection, a network timeout
//     the client derived from ctx's deadline — failed because of that.
//     The error returned matches ctx's error with errors.Is, and not
//     ErrUnavailable; its text keeps err's.
//   - An error that already wraps ErrUnavailable is returned as it is.
//   - Anything else is the backend's failure: ErrUnavailable wrapping err.
//     A context error while ctx is live is the backend's own time bound
//     (a per-call timeout) running out: the server did not answer in time.
func Classify(ctx context.Context, what string, err error) error {
	if err == nil || isAnswer(err) {
		return err
	}
	if cerr := ended(ctx); cerr != nil {
		if errors.Is(err, cerr) && !errors.Is(err, ErrUnavailable) {
			return err
		}
		if what != "" {
			return fmt.Errorf("%w (%s: %v)", cerr, what, err)
		}
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		what = join(what, "no answer in time")
	}
	if what != "" {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// isAnswer reports whether err carries a sentinel that is the engine's
// answer rather than a failure to get one.
func isAnswer(err error) bool {
	return errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotHeld) ||
		errors.Is(err, ErrInvalidName) || errors.Is(err, ErrUnsupported)
}

// ended returns ctx's error, or DeadlineExceeded once ctx's deadline has
// passed even if ctx has not reported it yet; nil while ctx is live.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

func join(what, more string) string {
	if what == "" {
		return more
	}
	return what + ": " + more
}
