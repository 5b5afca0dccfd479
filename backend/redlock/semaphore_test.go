package redlock_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/internal/testenv"
)

// partialClient is a client that reaches only the nodes of nodes whose
// index is in reach: the others through proxies that are closed.
func partialClient(t *testing.T, nodes []*testenv.Redis, reach ...int) *dlock.Client {
	t.Helper()
	var a []string
	for i, n := range nodes {
		if slices.Contains(reach, i) {
			a = append(a, n.Addr)
			continue
		}
		p := testenv.NewProxy(t, n.Addr)
		p.Close()
		a = append(a, p.Addr())
	}
	c := dlock.New(newDriver(a))
	t.Cleanup(func() { c.Close() })
	return c
}

// permitsOn is the number of permits of the semaphore name on the node
// at addr, live or not yet pruned.
func permitsOn(t *testing.T, ctx context.Context, addr, name string) int64 {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	n, err := rdb.ZCard(ctx, redisscript.KeysFor("dlock", name).Permits).Result()
	if err != nil {
		t.Fatalf("count the permits of %q on %s: %v", name, addr, err)
	}
	return n
}

// The pitfall of counting permits on each node: with three nodes and two
// permits, clients that reach {n0, n1}, {n1, n2} and {n0, n2} would each
// find fewer than two permits on both of their nodes, and all three would
// hold. A permit is a slot held on a majority, and each pair of the three
// shares a node: the third client finds no slot free on both of its nodes.
func TestPartitionedContendersNeverExceedThePermits(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	lockUnlock(t, open(t, nodes), "seed") // a first use seeds every node's fence state
	views := [][]int{{0, 1}, {1, 2}, {0, 2}}
	var held []*dlock.Lease
	for _, reach := range views {
		c := partialClient(t, nodes, reach...)
		l, err := c.Semaphore("sem", 2, dlock.WithTTL(30*time.Second)).TryAcquire(ctx)
		switch {
		case err == nil:
			held = append(held, l)
			defer l.Unlock(ctx)
		case !errors.Is(err, dlock.ErrNotAcquired):
			t.Fatalf("TryAcquire reaching nodes %v: %v", reach, err)
		}
		if len(held) > 2 {
			t.Fatalf("%d holders of a semaphore of 2 permits, reaching nodes %v each", len(held), views)
		}
	}
	if len(held) != 2 {
		t.Fatalf("%d holders of a semaphore of 2 permits; want the first two clients granted", len(held))
	}
	// The third waits, and is granted once a permit is released.
	c := partialClient(t, nodes, views[2]...)
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if l, err := c.Semaphore("sem", 2).Acquire(wctx); err == nil {
		t.Fatalf("a third client was granted a permit (token %d) while two held", l.Token())
	}
	if err := held[0].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.Semaphore("sem", 2).Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire after a permit was released: %v", err)
	}
	if l.Token() <= held[1].Token() {
		t.Errorf("token %d after grants with %d and %d", l.Token(), held[0].Token(), held[1].Token())
	}
	_ = l.Unlock(ctx)
}

// A permit granted on a minority of the nodes is no grant: here both
// permits are held on n1 and n2 by clients that do not reach n0, so a
// client that reaches all three nodes is granted a slot on n0 alone. It
// is refused, and gives that slot back.
func TestPermitOnMinorityIsNoGrant(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	c := open(t, nodes)
	lockUnlock(t, c, "seed")
	for range 2 {
		l, err := partialClient(t, nodes, 1, 2).Semaphore("sem", 2, dlock.WithTTL(30*time.Second)).TryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire on {n1, n2}: %v", err)
		}
		defer l.Unlock(ctx)
	}
	if got := permitsOn(t, ctx, nodes[0].Addr, "sem"); got != 0 {
		t.Fatalf("%d permits on n0, which the holders do not reach", got)
	}
	l, err := c.Semaphore("sem", 2).TryAcquire(ctx)
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire with a slot free on n0 only = %v, %v; want ErrNotAcquired", l, err)
	}
	if got := permitsOn(t, ctx, nodes[0].Addr, "sem"); got != 0 {
		t.Errorf("%d permits left on n0 by the refused attempt", got)
	}
	// A permit on n0 alone, with a token (both rounds of a grant made
	// there only), is not reported: Inspect lists the two on {n1, n2}.
	k := redisscript.KeysFor("dlock", "sem")
	rdb := redis.NewClient(&redis.Options{Addr: nodes[0].Addr})
	defer rdb.Close()
	if r, err := k.AcquireSlot(ctx, rdb, "minority", time.Minute, 2, -1, nil, "dlock:fence-state"); err != nil || !r.Granted {
		t.Fatalf("first round on n0: %+v, %v", r, err)
	}
	if _, held, _, err := k.SlotToken(ctx, rdb, "minority", 0, 1000, "dlock:fence-state"); err != nil || !held {
		t.Fatalf("second round on n0: %v, %v", held, err)
	}
	in, err := c.Inspect(ctx, "sem")
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Permits) != 2 || in.Token == 1000 {
		t.Errorf("Inspect = %+v; want the 2 permits held on {n1, n2}, not the one on n0", in)
	}
	if _, err := k.ReleaseSlot(ctx, rdb, "minority", -1); err != nil {
		t.Fatal(err)
	}

	// A client that reaches only one node is refused as unavailable.
	if l, err := partialClient(t, nodes, 0).Semaphore("sem", 2).TryAcquire(ctx); !errors.Is(err, dlock.ErrUnavailable) {
		t.Errorf("TryAcquire reaching one node of three = %v, %v; want ErrUnavailable", l, err)
	}
	if got := permitsOn(t, ctx, nodes[0].Addr, "sem"); got != 0 {
		t.Errorf("%d permits left on n0 by the attempt that reached it alone", got)
	}
}

// Permits granted at the same moment read the same counters in their
// first rounds; each node claims a token for one grant only, so no two
// of them get the same token, and every round's tokens are above the
// round before's.
func TestConcurrentPermitsNeverShareAToken(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, 2*time.Minute)
	const clients, rounds = 6, 8
	var cs []*dlock.Client
	for range clients {
		cs = append(cs, open(t, nodes))
	}
	lockUnlock(t, cs[0], "seed")
	var prev uint64
	for round := range rounds {
		var mu sync.Mutex
		var tokens []uint64
		var wg sync.WaitGroup
		start, release := make(chan struct{}), make(chan struct{})
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := c.Semaphore("sem", clients).Acquire(ctx)
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				mu.Lock()
				tokens = append(tokens, l.Token())
				mu.Unlock()
				<-release // every permit is held until the round is over
				_ = l.Unlock(ctx)
			}()
		}
		close(start)
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			n := len(tokens)
			mu.Unlock()
			if n == clients || time.Now().After(deadline) {
				break
			}
		}
		close(release)
		wg.Wait()
		slices.Sort(tokens)
		if len(slices.Compact(slices.Clone(tokens))) != len(tokens) {
			t.Errorf("round %d: %d permits granted at once share tokens: %v", round, len(tokens), tokens)
		}
		if len(tokens) > 0 && tokens[0] <= prev {
			t.Errorf("round %d: token %d after an earlier round's %d", round, tokens[0], prev)
		}
		if len(tokens) > 0 {
			prev = tokens[len(tokens)-1]
		}
	}
}

// A permit is renewed while a majority of the nodes hold it: lost on one
// node of three, it is kept; lost on two, its lease ends.
func TestPermitRenewalNeedsAMajority(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	c := open(t, nodes)
	lockUnlock(t, c, "seed")
	other := open(t, nodes)
	mine, err := c.Semaphore("sem", 2, dlock.WithTTL(time.Second)).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := other.Semaphore("sem", 2, dlock.WithTTL(time.Second)).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Unlock(ctx)
	drop := func(addr string) {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		k := redisscript.KeysFor("dlock", "sem")
		if err := rdb.ZRem(ctx, k.Permits, ownerOf(t, ctx, rdb, k, mine.Token())).Err(); err != nil {
			t.Fatal(err)
		}
	}
	drop(nodes[0].Addr)
	select {
	case <-mine.Done():
		t.Fatalf("permit lost when one node of three dropped it: %v", mine.Err())
	case <-time.After(2 * time.Second): // several renewals
	}
	drop(nodes[1].Addr)
	select {
	case <-mine.Done():
	case <-time.After(10 * time.Second): // a renewed permit would stay
		t.Fatal("permit still held 10s (ten TTLs) after two nodes of three dropped it")
	}
	select {
	case <-theirs.Done():
		t.Errorf("the other permit was lost: %v", theirs.Err())
	default:
	}
}

// ownerOf is the owner key of the permit with token tok on a node.
func ownerOf(t *testing.T, ctx context.Context, rdb *redis.Client, k redisscript.Keys, tok uint64) string {
	t.Helper()
	h, err := rdb.HGetAll(ctx, k.Holders).Result()
	if err != nil {
		t.Fatal(err)
	}
	for owner, v := range h {
		if strings.HasPrefix(v, strconv.FormatUint(tok, 10)+" ") {
			return owner
		}
	}
	t.Fatalf("no permit with token %d in %v", tok, h)
	return ""
}

// A release, and a Break, of a permit wakes the waiters: it publishes on
// the name's channel on every node that held it, as a mutex's release
// does.
func TestPermitReleaseWakesWaiters(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	c := open(t, nodes)
	lockUnlock(t, c, "seed")
	var subs []*redis.PubSub
	for _, n := range nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
		t.Cleanup(func() { rdb.Close() })
		ps := rdb.Subscribe(ctx, redisscript.KeysFor("dlock", "sem").Channel)
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, ps)
	}
	heard := func(what string) {
		t.Helper()
		for i, ps := range subs {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := ps.ReceiveMessage(rctx)
			cancel()
			if err != nil {
				t.Errorf("%s: no wake-up on node %d: %v", what, i, err)
			}
		}
	}
	l, err := c.Semaphore("sem", 2).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	heard("release")
	if _, err = c.Semaphore("sem", 2).TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Break(ctx, "sem"); err != nil {
		t.Fatal(err)
	}
	heard("break")
}

// A re-seed of a node that lost its counters waits for a permit whose
// grant is between its rounds (its first round done on n0 and n1, token
// 0), and copies the counter its second round raised, as it does for a
// mutex's grant (TestReseedWaitsForGrantBetweenRounds).
func TestReseedWaitsForPermitBetweenRounds(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	c := open(t, nodes)
	l, err := c.Semaphore("p", 2).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tok := l.Token()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	k := redisscript.KeysFor("dlock", "p")
	var direct []*redis.Client
	for _, n := range nodes[:2] {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
		t.Cleanup(func() { rdb.Close() })
		direct = append(direct, rdb)
		if r, err := k.AcquireSlot(ctx, rdb, "between", time.Minute, 2, -1, nil, "dlock:fence-state"); err != nil || !r.Granted || r.Slot != 0 {
			t.Fatalf("first round on %s: %+v, %v", n.Addr, r, err)
		}
	}
	restartAndSeeReseedWait(t, ctx, c, nodes[2].Addr, nodes[2].Restart, "a permit")
	for _, rdb := range direct {
		if claimed, held, _, err := k.SlotToken(ctx, rdb, "between", 0, tok+1, "dlock:fence-state"); err != nil || !claimed || !held {
			t.Fatalf("second round: claimed %v, held %v, %v", claimed, held, err)
		}
	}
	waitSeeded(t, nodes[2].Addr)
	if got := fenceCounter(t, ctx, nodes[2].Addr, "p"); got < tok+1 {
		t.Errorf("p's counter on the re-seeded node: %d, want >= %d, the token of the permit that was between its rounds", got, tok+1)
	}
}

// Renewal checks the slot on each node, not only the owner: a node where
// the owner's permit is for another slot (a slot it was given in a first
// round that lost, if its give-back did not arrive) does not count. Here
// two nodes of three say so, and the lease ends.
func TestPermitRenewalChecksTheSlot(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	c := open(t, nodes)
	lockUnlock(t, c, "seed")
	l, err := c.Semaphore("sem", 2, dlock.WithTTL(time.Second)).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k := redisscript.KeysFor("dlock", "sem")
	for _, n := range nodes[:2] {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
		owner := ownerOf(t, ctx, rdb, k, l.Token())
		v, err := rdb.HGet(ctx, k.Holders, owner).Result()
		if err != nil {
			t.Fatal(err)
		}
		tok, rest, _ := strings.Cut(v, " ")
		_, holder, _ := strings.Cut(rest, " ")
		if err := rdb.HSet(ctx, k.Holders, owner, tok+" 1 "+holder, "#1", owner).Err(); err != nil {
			t.Fatal(err)
		}
		rdb.Close()
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second): // a renewed permit would stay
		t.Fatal("permit still held 10s (ten TTLs) after two nodes of three gave its owner another slot")
	}
}

// What a request's own limit keeps under a partition, as the package
// documentation says: it is counted on each node of the majority the
// request reaches. B (n = 5) holds slot 1 on {n0, n1}, X (n = 5) slot 2 on
// {n1, n2}; slot 0 is free. W asks with n = 2 reaching {n0, n2}, each of
// which holds one permit: W is granted, beside B and X.
func TestDisagreeingLimitsUnderPartitionAreCountedPerNode(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	full := open(t, nodes)
	lockUnlock(t, full, "seed")
	acquire := func(c *dlock.Client, n int) (*dlock.Lease, error) {
		return c.Semaphore("sem", n, dlock.WithTTL(30*time.Second)).TryAcquire(ctx)
	}
	a, err := acquire(full, 5) // slot 0 everywhere
	if err != nil {
		t.Fatal(err)
	}
	b, err := acquire(partialClient(t, nodes, 0, 1), 5) // slot 1 on {n0, n1}
	if err != nil {
		t.Fatal(err)
	}
	defer b.Unlock(ctx)
	x, err := acquire(partialClient(t, nodes, 1, 2), 5) // slot 2 on {n1, n2}
	if err != nil {
		t.Fatal(err)
	}
	defer x.Unlock(ctx)
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := acquire(partialClient(t, nodes, 0, 2), 2)
	if err != nil {
		t.Fatalf("TryAcquire with n = 2 on {n0, n2}, each holding one permit: %v; the documentation says it is granted", err)
	}
	_ = w.Unlock(ctx)
}
