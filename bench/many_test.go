package bench

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestManyKeysCountsFailedUnlocks: scenario C counts the unlocks that fail
// (a lease lost while held), and says so, so that a run whose leases were
// lost is not reported as holding its names at once. The workers here are
// in-memory: this tests the harness, not a backend.
func TestManyKeysCountsFailedUnlocks(t *testing.T) {
	var n atomic.Int64
	lost := errors.New("dlock: lease lost")
	w := worker{lock: func(ctx context.Context, key string) (func() error, error) {
		k := n.Add(1)
		return func() error {
			if k%10 == 0 {
				return lost
			}
			return nil
		}, nil
	}, close: func() {}}
	var m manyKeys
	m.run([]worker{w, w}, "t/", 100, time.Now().Add(time.Minute), math.Inf(1), t.Logf)
	if m.held != 100 || m.errors != 0 || m.unlockErrors != 10 || m.firstUnlockErr != lost.Error() {
		t.Fatalf("held %d, errors %d, unlock errors %d (%q); want 100, 0, 10", m.held, m.errors, m.unlockErrors, m.firstUnlockErr)
	}
	if !strings.Contains(m.stoppedNote(), "10 unlocks failed") {
		t.Errorf("the note does not say so: %q", m.stoppedNote())
	}
}
