package temporallock

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/internal/testenv"
)

// TestTerminatedMutexWorkflowNextTokenIsHigher: the package doc's "even if
// an operator terminates a mutex workflow, the next one starts above every
// token the old one granted". The mutex workflow of a held lock is
// terminated; the next Lock starts a new one, whose grant has a higher
// token than every grant before, and the old holder's Unlock reports the
// loss without freeing the new holder's lock.
func TestTerminatedMutexWorkflowNextTokenIsHigher(t *testing.T) {
	srv := startServer(t)
	d := srv.open(t, "")
	c := dlock.New(d, dlock.WithTTL(testTTL))
	ctx := testenv.Context(t, 120*time.Second)
	const name = "terminated/mutex"
	l, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	old, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.c.TerminateWorkflow(ctx, WorkflowID(ModeFair, name), "", "test: an operator terminates the mutex workflow"); err != nil {
		t.Fatal(err)
	}
	next := srv.client(t)
	l2, err := next.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after the mutex workflow was terminated: %v", err)
	}
	if l2.Token() <= old.Token() {
		t.Errorf("token from the new mutex workflow %d, want > %d (the terminated one's last grant)", l2.Token(), old.Token())
	}
	if err := old.Unlock(ctx); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Unlock of the lease of the terminated workflow: got %v, want ErrLeaseLost", err)
	}
	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("the new holder's lock must still be held; TryLock got %v", err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
