package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/internal/testenv"
)

// ForeignHolderKilled checks, for a compat mode, a lock name held by a
// foreign client (another library's lock recipe in a process of its
// own): c's TryLock finds it held; Inspect shows it held, with token 0,
// no host or pid (dlock cannot know who it is), and at most bound left;
// and a Lock of c waiting while kill SIGKILLs the foreign process is
// granted, after the kill, within bound plus a second. It returns that
// lease, to be released by the caller.
func ForeignHolderKilled(t *testing.T, c *dlock.Client, name string, bound time.Duration, kill func()) *dlock.Lease {
	t.Helper()
	return ForeignHolderKilledWithToken(t, c, name, 0, bound, kill)
}

// ForeignHolderKilledWithToken is ForeignHolderKilled for a layout in
// which a foreign grant has a token of the same sequence as dlock's (such
// as etcd's create revision): Inspect shows that token, and the lease
// granted after the kill has a higher one.
func ForeignHolderKilledWithToken(t *testing.T, c *dlock.Client, name string, token uint64, bound time.Duration, kill func()) *dlock.Lease {
	t.Helper()
	ctx := testenv.Context(t, bound+30*time.Second)
	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock while a foreign client holds %q: %v, want ErrNotAcquired", name, err)
	}
	in, err := c.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Held || in.Token != token || in.ExpiresIn > bound || in.Holder.Host != "" || in.Holder.PID != 0 {
		t.Errorf("Inspect = %+v; want held, token %d, no host or pid, expiring within %v", in, token, bound)
	}
	var l *dlock.Lease
	took, err := testenv.WaitAcross(t, func() (err error) {
		l, err = c.Mutex(name).Lock(ctx)
		return err
	}, kill)
	if err != nil {
		t.Fatalf("Lock after the foreign holder of %q was killed: %v", name, err)
	}
	t.Logf("granted %v after the kill of the foreign holder (bound %v)", took.Round(time.Millisecond), bound)
	if l.Token() <= token {
		t.Errorf("granted token %d after the foreign holder's %d; want a higher one", l.Token(), token)
	}
	if took > bound+time.Second {
		t.Errorf("granted %v after the kill; want within %v (plus 1s)", took, bound)
	}
	return l
}

// MixedFleetTurns checks the outcome of a mixed-fleet run, in which the
// workers of two sides (dlock's and a foreign library's) each took perSide
// turns at incrementing one counter under one lock: counter is the
// counter's final value, and turns the side of each increment, in order.
// No increment may be lost, each side must have had its turns, and the
// lock must have passed between the sides at least minSwitches times, for
// the run to show them excluding each other.
func MixedFleetTurns(t *testing.T, counter int, turns []string, sides [2]string, perSide, minSwitches int) {
	t.Helper()
	switches := 0
	count := map[string]int{}
	for i, s := range turns {
		count[s]++
		if i > 0 && s != turns[i-1] {
			switches++
		}
	}
	want := 2 * perSide
	t.Logf("counter %d of %d increments; turns %v; the lock passed between %s and %s %d times", counter, want, count, sides[0], sides[1], switches)
	if counter != want {
		t.Errorf("counter = %d, want %d: %d increments lost", counter, want, want-counter)
	}
	if count[sides[0]] != perSide || count[sides[1]] != perSide {
		t.Errorf("turns = %v, want %d each", count, perSide)
	}
	if switches < minSwitches {
		t.Errorf("the lock passed between %s and %s %d times, want at least %d for the run to show them excluding each other", sides[0], sides[1], switches, minSwitches)
	}
}

// MixedFleetLosesIncrements checks the outcome of the same run with dlock
// in its own layout (no compat), where the foreign side cannot see
// dlock's locks: of want increments, some must be lost, as the README
// says. A run that loses none would mean the test cannot tell a layout
// that excludes the foreign recipe from one that does not.
func MixedFleetLosesIncrements(t *testing.T, counter, want int) {
	t.Helper()
	t.Logf("own layout: counter %d of %d increments, %d lost", counter, want, want-counter)
	if counter >= want {
		t.Errorf("counter = %d of %d increments: none lost, although dlock in its own layout does not exclude the foreign clients", counter, want)
	}
}

// CountTurns is the loop of a worker process in a mixed-fleet test (the
// test binary started as a child): n times it calls lock, which takes the
// lock and returns the grant's token and its release, runs turn (the
// read–sleep–write under test) with that token, releases, and pauses for
// up to pause, as a worker doing other work would, so that the lock is
// now and then free when a foreign waiter looks. It prints "DONE n" on
// stdout when all are done, or "ERROR …" at the first error, and returns
// the process's exit status: 0, or 2.
func CountTurns(n int, pause time.Duration, lock func() (token uint64, unlock func() error, err error), turn func(token uint64) error) int {
	for range n {
		token, unlock, err := lock()
		if err == nil {
			err = turn(token)
			if uerr := unlock(); err == nil {
				err = uerr
			}
		}
		if err != nil {
			fmt.Println("ERROR", err)
			return 2
		}
		time.Sleep(rand.N(pause))
	}
	fmt.Println("DONE", n)
	return 0
}

// MutexTurns returns a lock for CountTurns that takes m with ctx.
func MutexTurns(ctx context.Context, m *dlock.Mutex) func() (uint64, func() error, error) {
	return func() (uint64, func() error, error) {
		l, err := m.Lock(ctx)
		if err != nil {
			return 0, nil, err
		}
		return l.Token(), func() error { return l.Unlock(ctx) }, nil
	}
}
