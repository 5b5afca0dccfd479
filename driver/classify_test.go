package driver_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock/driver"
)

func TestClassify(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	refused := errors.New("dial tcp 127.0.0.1:1: connection refused")
	ownTimeout := fmt.Errorf("query: %w", context.DeadlineExceeded)
	lost := fmt.Errorf("%w: key gone", driver.ErrLeaseLost)
	classified := fmt.Errorf("%w: redis: %w", driver.ErrUnavailable, refused)

	for _, tc := range []struct {
		name    string
		ctx     context.Context
		err     error
		want    []error // errors.Is must hold for each
		notWant []error // and for none of these
		text    string  // the result's text must contain it
	}{
		{"nil", live, nil, nil, nil, ""},
		{"BackendFailure", live, refused, []error{driver.ErrUnavailable, refused}, []error{context.Canceled}, "op: dial tcp"},
		{"OwnTimeoutWhileContextLive", live, ownTimeout, []error{driver.ErrUnavailable, context.DeadlineExceeded}, nil, "no answer in time"},
		{"AlreadyClassified", live, classified, []error{driver.ErrUnavailable}, nil, ""},
		{"Answer", live, lost, []error{driver.ErrLeaseLost}, []error{driver.ErrUnavailable}, ""},
		{"ContextCancelled", cancelled, context.Canceled, []error{context.Canceled}, []error{driver.ErrUnavailable}, ""},
		{"ContextDeadline", expired, ownTimeout, []error{context.DeadlineExceeded}, []error{driver.ErrUnavailable}, ""},
		{"ContextCancelledAndBackendFailed", cancelled, refused, []error{context.Canceled}, []error{driver.ErrUnavailable}, "connection refused"},
		{"ContextDeadlineAndBackendFailed", expired, refused, []error{context.DeadlineExceeded}, []error{driver.ErrUnavailable}, "connection refused"},
		{"ContextEndedAndBackendClassifiedItsFailure", cancelled, classified, []error{context.Canceled}, []error{driver.ErrUnavailable}, "connection refused"},
		{"ContextCancelledButDeadlineFromCallerBound", cancelled, ownTimeout, []error{context.Canceled}, []error{driver.ErrUnavailable, context.DeadlineExceeded}, ""},
		{"AnswerStandsWhenContextEnded", cancelled, lost, []error{driver.ErrLeaseLost}, []error{context.Canceled}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := driver.Classify(tc.ctx, "op", tc.err)
			if tc.err == nil {
				if got != nil {
					t.Fatalf("Classify(nil) = %v", got)
				}
				return
			}
			for _, w := range tc.want {
				if !errors.Is(got, w) {
					t.Errorf("Classify: got %q, want it to match %q", got, w)
				}
			}
			for _, w := range tc.notWant {
				if errors.Is(got, w) {
					t.Errorf("Classify: got %q, want it not to match %q", got, w)
				}
			}
			if !strings.Contains(got.Error(), tc.text) {
				t.Errorf("Classify: got %q, want it to say %q", got, tc.text)
			}
			// The portable layer classifies again what a driver returns:
			// that must change nothing.
			if again := driver.Classify(tc.ctx, "again", got); again.Error() != got.Error() {
				t.Errorf("Classify twice: %q, then %q", got, again)
			}
		})
	}
}
