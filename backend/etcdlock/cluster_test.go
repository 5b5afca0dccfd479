package etcdlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/internal/testenv"
)

// leader returns the index of the raft leader, waiting for one.
func (d *deployment) leader(t testing.TB) int {
	t.Helper()
	return leaderOf(t, d.members)
}

// TestClusterMemberStopKeepsLocksAndQueues stops the leader of a 3-member
// cluster while two locks are held and waited on: the holders keep their
// leases (renewed through the other members, across the election), the
// waiters are still granted in turn, and tokens keep increasing — also
// once the stopped member is back.
func TestClusterMemberStopKeepsLocksAndQueues(t *testing.T) {
	d := threeMembers(t)
	eps := d.endpoints()
	const ttl = 6 * time.Second // renewals must outlast an election (1-2 s)
	ctx := testContext(t)
	names := []string{"member-stop/a", "member-stop/b"}

	held := make([]*dlock.Lease, len(names))
	type result struct {
		l   *dlock.Lease
		err error
	}
	granted := make([]chan result, len(names))
	inspector := newLocker(t, eps)
	for i, name := range names {
		l, err := newLocker(t, eps, dlock.WithTTL(ttl)).Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held[i] = l
		granted[i] = make(chan result, 1)
		waiter := newLocker(t, eps, dlock.WithTTL(ttl))
		go func() {
			l, err := waiter.Mutex(name).Lock(ctx)
			granted[i] <- result{l, err}
		}()
		waitWaiters(t, inspector, name, 1)
	}

	stopped := d.leader(t)
	d.stop(t, stopped)
	t.Logf("stopped member %d, the leader", stopped)

	// Two TTLs: every lease needs renewals through the new leader.
	select {
	case <-held[0].Done():
		t.Fatalf("holder of %q lost its lease after a member stopped: %v", names[0], held[0].Err())
	case <-held[1].Done():
		t.Fatalf("holder of %q lost its lease after a member stopped: %v", names[1], held[1].Err())
	case r := <-granted[0]:
		t.Fatalf("waiter of %q granted while the lock was held: %+v", names[0], r)
	case r := <-granted[1]:
		t.Fatalf("waiter of %q granted while the lock was held: %+v", names[1], r)
	case <-time.After(2 * ttl):
	}

	last := uint64(0)
	for i, name := range names {
		if err := held[i].Unlock(ctx); err != nil {
			t.Fatalf("Unlock %q: %v", name, err)
		}
		var r result
		select {
		case r = <-granted[i]:
		case <-time.After(30 * time.Second):
			t.Fatalf("waiter of %q not granted within 30s of the release", name)
		}
		if r.err != nil {
			t.Fatalf("waiter of %q: %v", name, r.err)
		}
		if r.l.Token() <= held[i].Token() {
			t.Errorf("%q: waiter's token %d, want > %d", name, r.l.Token(), held[i].Token())
		}
		if err := r.l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		last = max(last, r.l.Token())
	}

	// Keep granting with the member down, then with it back.
	c := newLocker(t, eps, dlock.WithTTL(ttl))
	for i := range 3 {
		last = lockUnlockAbove(ctx, t, c, names[0], last)
		if i == 1 {
			d.start(t, stopped)
			t.Logf("started member %d again", stopped)
		}
	}
	back := newLocker(t, d.members[stopped].Endpoints(), dlock.WithTTL(ttl))
	lockUnlockAbove(ctx, t, back, names[0], last)
}

// lockUnlockAbove takes and releases name, checking that its token is above
// last; it returns the token.
func lockUnlockAbove(ctx context.Context, t *testing.T, c *dlock.Client, name string, last uint64) uint64 {
	t.Helper()
	l, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock %q: %v", name, err)
	}
	if l.Token() <= last {
		t.Errorf("%q: token %d, want > %d", name, l.Token(), last)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock %q: %v", name, err)
	}
	return l.Token()
}

// waitWaiters waits until Inspect shows n waiters on name.
func waitWaiters(t *testing.T, c *dlock.Client, name string, n int) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d waiters on %q", n, name), func() error {
		in, err := c.Inspect(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if len(in.Waiters) < n {
			return fmt.Errorf("%d waiters", len(in.Waiters))
		}
		return nil
	})
}
