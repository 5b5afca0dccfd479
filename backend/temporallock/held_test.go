package temporallock

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/internal/testenv"
)

// testHeldLockKeepsOneGoroutine: a client holding many locks keeps no
// goroutine of its own per lock; what it keeps is in its worker, which
// caches each mutex workflow it ran, and the SDK runs a cached workflow's
// code on one goroutine per coroutine. The mutex workflow has one, its
// main loop (signalsVersion), so n held locks add n goroutines, not 2n.
func testHeldLockKeepsOneGoroutine(t *testing.T, srv server) {
	const n = 50
	ctx := testenv.Context(t, 3*time.Minute)
	c := dlock.New(srv.open(t, ""), dlock.WithTTL(time.Minute))
	// A first lock starts what every driver runs once (pollers, streams).
	warm, err := c.Mutex(t.Name() + "/warm").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	before := testenv.SettledGoroutines()
	leases := make([]*dlock.Lease, 0, n)
	defer func() {
		for _, l := range leases {
			_ = l.Unlock(ctx)
		}
	}()
	for i := range n {
		l, err := c.Mutex(fmt.Sprintf("%s/%d", t.Name(), i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	held := testenv.SettledGoroutines()
	perLock := float64(held-before) / n
	t.Logf("%d held locks: %d goroutines more (%.2f per lock)", n, held-before, perLock)
	// One per lock; a few more or fewer may come and go with the SDK's
	// pollers, far fewer than a second goroutine per lock would add.
	if perLock > 1.4 {
		t.Fatalf("%.2f goroutines per held lock, want 1 (the cached mutex workflow's main loop)", perLock)
	}
}
