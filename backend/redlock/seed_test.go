package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/backend/redlock"
	"github.com/dlock/dlock/internal/testenv"
)

// Nodes without fence state (a fresh deployment, or counters left by a
// version without fence states) are seeded at first use, and only with
// every node answering: each then holds the largest of every counter and
// is marked complete.
func TestFirstUseSeedsEveryNode(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	// Counters of an earlier version: k's last grant wrote 41 on n0 and
	// n1; q's wrote 7 on n0 and n1.
	for _, n := range nodes[:2] {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
		for name, v := range map[string]int{"k": 41, "q": 7} {
			if err := rdb.Set(ctx, redisscript.KeysFor("dlock", name).Fence, v, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		rdb.Close()
	}
	c := open(t, nodes)
	nodes[2].Kill()
	l, err := c.Mutex("k").TryLock(ctx)
	if err == nil {
		_ = l.Unlock(ctx)
		t.Fatalf("first use with a node down granted token %d", l.Token())
	}
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "only 0 holds its fence counters") {
		t.Fatalf("first use with a node down = %v; want ErrUnavailable saying that no node holds its fence counters", err)
	}
	nodes[2].Start()
	if tok := lockUnlock(t, c, "k"); tok != 42 {
		t.Errorf("first grant of k: token %d, want 42", tok)
	}
	for _, n := range nodes {
		if s := fenceState(t, ctx, n.Addr); s != "complete" {
			t.Errorf("fence state of %s after the first use: %q, want complete", n.Addr, s)
		}
	}
	if got := fenceCounter(t, ctx, nodes[2].Addr, "q"); got != 7 {
		t.Errorf("q's counter on the node that had none: %d, want 7 (copied)", got)
	}
}

// A re-seed runs while grants go on: it copies counters it read a moment
// earlier, while the grants raise the same counters on the node being
// re-seeded. The copy only ever raises a counter, so none ends below the
// last token issued, and with another node down the tokens go on
// increasing.
func TestReseedConcurrentWithGrantsNeverLowersCounter(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, 2*time.Minute)
	c := open(t, nodes)
	lockUnlock(t, c, "first") // the first use seeds the nodes
	// Many counters, as if left by earlier grants, so that the re-seed
	// takes a while.
	const names, workers = 5000, 4
	name := func(i int) string { return fmt.Sprintf("n%d", i) }
	for _, n := range nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range names {
				p.Set(ctx, redisscript.KeysFor("dlock", name(i)).Fence, 1000+i, 0)
			}
			return nil
		})
		rdb.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	nodes[2].Restart()

	var mu sync.Mutex
	issued := map[string][]uint64{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20000 {
				select {
				case <-stop:
					return
				default:
				}
				n := name(w + workers*(i%50)*(names/workers/50)) // each worker its own names
				l, err := c.Mutex(n, dlock.WithTTL(2*time.Second)).TryLock(ctx)
				if err != nil {
					t.Errorf("TryLock(%s) during the re-seed: %v", n, err)
					return
				}
				mu.Lock()
				issued[n] = append(issued[n], l.Token())
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("Unlock(%s): %v", n, err)
					return
				}
			}
		}()
	}
	waitSeeded(t, nodes[2].Addr)
	close(stop)
	wg.Wait()

	last := map[string]uint64{}
	grants := 0
	for n, toks := range issued {
		for j := 1; j < len(toks); j++ {
			if toks[j] <= toks[j-1] {
				t.Errorf("%s: token %d after %d", n, toks[j], toks[j-1])
			}
		}
		last[n] = toks[len(toks)-1]
		grants += len(toks)
	}
	t.Logf("%d grants on %d names during the re-seed", grants, len(issued))
	for n, tok := range last {
		if got := fenceCounter(t, ctx, nodes[2].Addr, n); got < tok {
			t.Errorf("%s: counter %d on the re-seeded node, below the last token %d", n, got, tok)
		}
	}
	// n1 cut off: the grants are on {n0, n2}.
	p1 := testenv.NewProxy(t, nodes[1].Addr)
	c2 := dlock.New(newDriver([]string{nodes[0].Addr, p1.Addr(), nodes[2].Addr}))
	t.Cleanup(func() { c2.Close() })
	p1.Close()
	for n, tok := range last {
		l, err := c2.Mutex(n).TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock(%s) on {n0, n2 re-seeded}: %v", n, err)
		}
		if l.Token() <= tok {
			t.Errorf("%s on {n0, n2 re-seeded}: token %d, want > %d", n, l.Token(), tok)
		}
		_ = l.Unlock(ctx)
	}
}

// A re-seed that finds a grant between its two rounds (its lock holds
// token 0 on the nodes it reads) reads that counter again until the
// second round is done: the node re-seeded is marked complete only with
// the token that round writes.
func TestReseedWaitsForGrantBetweenRounds(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	c := open(t, nodes)
	tok := lockUnlock(t, c, "p")

	// A grant of p does its first round on n0 and n1, and stops there.
	k := redisscript.KeysFor("dlock", "p")
	var direct []*redis.Client
	for _, n := range nodes[:2] {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
		t.Cleanup(func() { rdb.Close() })
		direct = append(direct, rdb)
		if r, err := k.AcquireRead(ctx, rdb, "between", time.Minute, nil, "dlock:fence-state"); err != nil || !r.Granted {
			t.Fatalf("first round on %s: %+v, %v", n.Addr, r, err)
		}
	}
	restartAndSeeReseedWait(t, ctx, c, nodes[2].Addr, nodes[2].Restart, "a grant")
	// The second round.
	for _, rdb := range direct {
		if ok, err := k.SetToken(ctx, rdb, "between", tok+1); err != nil || !ok {
			t.Fatalf("second round: %v, %v", ok, err)
		}
	}
	waitSeeded(t, nodes[2].Addr)
	if got := fenceCounter(t, ctx, nodes[2].Addr, "p"); got < tok+1 {
		t.Errorf("p's counter on the re-seeded node: %d, want >= %d, the token of the grant that was between its rounds", got, tok+1)
	}
}

// A first seeding that stopped after marking one node complete (the
// others new) is finished by the next acquire, whereas nodes without
// fence state next to a complete one have lost their counters, and
// acquiring is refused.
func TestFirstSeedingStoppedHalfWayIsFinished(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	set := func(states ...string) {
		for i, n := range nodes {
			setFenceState(t, ctx, n.Addr, states[i])
		}
	}
	c := open(t, nodes)
	set("complete", "", "")
	if l, err := c.Mutex("k").TryLock(ctx); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("TryLock with one node complete and two without fence state = %v, %v; want ErrUnavailable", l, err)
	}
	set("complete", "new", "new")
	lockUnlock(t, c, "k")
	for _, n := range nodes {
		if s := fenceState(t, ctx, n.Addr); s != "complete" {
			t.Errorf("fence state of %s: %q, want complete", n.Addr, s)
		}
	}
}

// A re-seed marks its node complete only if the node's state is still
// the one the copy began with: not after the node restarted (no state),
// nor after another client began a re-seed of its own.
func TestReseedDoesNotCompleteAChangedState(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	c := open(t, nodes)
	lockUnlock(t, c, "k")
	rdb := redis.NewClient(&redis.Options{Addr: nodes[2].Addr})
	defer rdb.Close()
	for _, tc := range []struct{ before, now string }{
		{"seeding a", ""},
		{"seeding a", "seeding b"},
	} {
		setFenceState(t, ctx, nodes[2].Addr, tc.now)
		if err := redlock.CompleteSeeding(ctx, rdb, "dlock", tc.before); err == nil {
			t.Errorf("a seeding that began as %q completed the node whose state is now %q", tc.before, tc.now)
		}
		if s := fenceState(t, ctx, nodes[2].Addr); s == "complete" {
			t.Errorf("state %q became complete after a seeding that began as %q", tc.now, tc.before)
		}
	}
}

// Clients that use fresh nodes for the first time at once each seed
// them, or find them seeded by another, and each is granted its lock.
func TestConcurrentFirstUseAllGranted(t *testing.T) {
	nodes := startNodes(t, 5)
	ctx := testenv.Context(t, time.Minute)
	var wg sync.WaitGroup
	for i := range 8 {
		c := dlock.New(newDriver(addrs(nodes)))
		t.Cleanup(func() { c.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Mutex(fmt.Sprintf("first-%d", i)).TryLock(ctx)
			if err != nil {
				t.Errorf("client %d, first use: %v", i, err)
				return
			}
			_ = l.Unlock(ctx)
		}()
	}
	wg.Wait()
}

// A node that another client is re-seeding (its claim has not run out)
// is left to that client; once the claim has run out, a grant takes the
// re-seed over and completes it.
func TestReseedLeavesNodeToAnotherClientsClaim(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	c := open(t, nodes)
	lockUnlock(t, c, "k")

	claim := "seeding other 99999999999999" // runs out in the year 5138
	setFenceState(t, ctx, nodes[2].Addr, claim)
	for range 20 {
		lockUnlock(t, c, "k") // each sees n2 incomplete
		if s := fenceState(t, ctx, nodes[2].Addr); s != claim {
			t.Fatalf("n2 under another client's claim became %q", s)
		}
	}

	setFenceState(t, ctx, nodes[2].Addr, "seeding other 1")
	lockUnlock(t, c, "k")
	waitSeeded(t, nodes[2].Addr)
}

// restartAndSeeReseedWait restarts a node (restart) while a grant of p
// (what) is between its rounds on the others, has c take another lock,
// which finds the node without counters and begins its re-seed, and
// checks that the re-seed waits: the node is not marked complete for
// 300 ms, when a re-seed of a few keys would be long done.
func restartAndSeeReseedWait(t *testing.T, ctx context.Context, c *dlock.Client, addr string, restart func(), what string) {
	t.Helper()
	restart()
	lockUnlock(t, c, "other") // sees the node without counters, and re-seeds it
	for s := ""; !strings.HasPrefix(s, "seeding ") && s != "complete"; s = fenceState(t, ctx, addr) {
		select {
		case <-ctx.Done():
			t.Fatalf("the re-seed of %s did not begin (fence state %q)", addr, s)
		case <-time.After(5 * time.Millisecond):
		}
	}
	for range 30 {
		if s := fenceState(t, ctx, addr); s == "complete" {
			t.Fatalf("%s was marked complete while %s of p was between its rounds", addr, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FenceStates reports each node's fence state in the order the nodes were
// given: complete on every node after the first use; "" on a node whose
// state is gone (as after a restart without persistence); "" and an error
// that names the node for a node that does not answer.
func TestFenceStatesReportsEachNode(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	var clients []redis.UniversalClient
	for _, n := range nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		clients = append(clients, rdb)
	}
	d, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	lockUnlock(t, dlock.New(d), "k") // the first use seeds every node
	states, err := d.FenceStates(ctx)
	if err != nil || strings.Join(states, ",") != "complete,complete,complete" {
		t.Fatalf("after the first use: %q, %v; want complete on every node", states, err)
	}
	setFenceState(t, ctx, nodes[1].Addr, "")
	nodes[2].Kill()
	states, err = d.FenceStates(ctx)
	if len(states) != 3 || states[0] != "complete" || states[1] != "" || states[2] != "" {
		t.Errorf("with node 1's state gone and node 2 down: %q, want complete and two empty", states)
	}
	if err == nil || !strings.Contains(err.Error(), nodes[2].Addr) || strings.Contains(err.Error(), nodes[1].Addr) {
		t.Errorf("with node 2 down: error %v, want one that names node 2 alone", err)
	}
}
