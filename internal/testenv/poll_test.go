package testenv_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock/internal/testenv"
)

// fatalRecorder is a test whose Fatalf is recorded rather than fatal.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Fatalf(format string, args ...any) { r.msg = fmt.Sprintf(format, args...) }

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	r := &fatalRecorder{TB: t}
	calls := 0
	testenv.Eventually(r, time.Minute, "three calls", func() error {
		if calls++; calls < 3 {
			return fmt.Errorf("%d calls", calls)
		}
		return nil
	})
	if r.msg != "" || calls != 3 {
		t.Errorf("Eventually: %d calls, failure %q; want 3 calls and no failure", calls, r.msg)
	}
}

func TestEventuallyFailureSaysWhatWasAwaitedAndWhatWasSeen(t *testing.T) {
	r := &fatalRecorder{TB: t}
	testenv.Eventually(r, 30*time.Millisecond, "the lock to be free", func() error {
		return errors.New("held by pid 42")
	})
	if !strings.Contains(r.msg, "the lock to be free") || !strings.Contains(r.msg, "held by pid 42") {
		t.Errorf("Eventually's failure: %q, want it to name what was awaited and the last state", r.msg)
	}
}

func TestPollStopsAtAFinalError(t *testing.T) {
	calls := 0
	gone := errors.New("the server exited")
	err := testenv.Poll(time.Minute, func() error {
		calls++
		return testenv.Final(gone)
	})
	if !errors.Is(err, gone) || calls != 1 {
		t.Errorf("Poll: %v after %d calls, want the final error after 1", err, calls)
	}
}
