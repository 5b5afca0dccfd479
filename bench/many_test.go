package bench

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
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
	m.run([]worker{w, w}, "t/", 100, time.Now().Add(time.Minute), math.Inf(1), nil, t.Logf)
	if m.held != 100 || m.errors != 0 || m.unlockErrors != 10 || m.firstUnlockErr != lost.Error() {
		t.Fatalf("held %d, errors %d, unlock errors %d (%q); want 100, 0, 10", m.held, m.errors, m.unlockErrors, m.firstUnlockErr)
	}
	if !strings.Contains(m.stoppedNote(), "10 unlocks failed") {
		t.Errorf("the note does not say so: %q", m.stoppedNote())
	}
}

// TestManyKeysMeasuresAgainAfterShed: a library's shed runs while the
// names are held, and the heap and goroutines per held lock are measured
// again after it. The in-memory workers here keep 16 KiB and a goroutine
// per name they locked in a cache the shed drops, and nothing else; what
// an earlier run left in the cache (here 300 names) is dropped before the
// run, and is not counted, before the shed or after.
func TestManyKeysMeasuresAgainAfterShed(t *testing.T) {
	var mu sync.Mutex
	cache := map[string][]byte{}
	stop := make(chan struct{})
	var parked sync.WaitGroup
	w := worker{lock: func(ctx context.Context, key string) (func() error, error) {
		mu.Lock()
		cache[key] = make([]byte, 16<<10)
		ch := stop
		mu.Unlock()
		parked.Go(func() { <-ch })
		return func() error { return nil }, nil
	}, close: func() {}}
	shed := func() {
		mu.Lock()
		clear(cache)
		close(stop)
		stop = make(chan struct{})
		mu.Unlock()
		parked.Wait()
	}
	for i := range 300 {
		if _, err := w.lock(context.Background(), "earlier/"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	var m manyKeys
	m.run([]worker{w, w}, "t/", 200, time.Now().Add(time.Minute), math.Inf(1), shed, t.Logf)
	if !m.shed {
		t.Fatal("the shed did not run")
	}
	if m.heapPerLock < 16<<10 || m.heapPerLock > 20<<10 || math.Abs(m.goroutinesPerLock-1) > 0.005 {
		t.Errorf("before the shed: %.0f B and %.2f goroutines per held lock, want 16 KiB and a little, and 1", m.heapPerLock, m.goroutinesPerLock)
	}
	if math.Abs(m.shedHeapPerLock) > 1<<10 || math.Abs(m.shedGoroutinesPerLock) > 0.005 {
		t.Errorf("after the shed: %.0f B and %.2f goroutines per held lock, want under 1 KiB and none", m.shedHeapPerLock, m.shedGoroutinesPerLock)
	}
	shed()
}
