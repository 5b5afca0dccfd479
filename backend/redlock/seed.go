package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/driver"
)

// A node's fence state, the value of its fence-state key <prefix>:fence-state
// (no TTL): whether the node's fence counters can be trusted to be
// complete. See the package documentation.
const (
	// stateComplete: the node holds every counter it should.
	stateComplete = "complete"
	// stateNew: a first seeding of the nodes began while this node had
	// no state; no grant has been made since (grants need a majority of
	// complete nodes), and the node has not restarted since (it would
	// have lost the key).
	stateNew = "new"
	// stateSeeding, followed by a random id and the time its claim runs
	// out: a client is copying counters into this node, which had lost
	// them.
	stateSeeding = "seeding "
)

var (
	//go:embed fence_state.lua
	fenceStateSrc string
	//go:embed read_counters.lua
	readCountersSrc string
	//go:embed raise_counters.lua
	raiseCountersSrc string

	fenceState    = redis.NewScript(fenceStateSrc)
	readCounters  = redis.NewScript(readCountersSrc)
	raiseCounters = redis.NewScript(raiseCountersSrc)
)

const (
	// seedBatch is how many locks one script call of a seeding reads or
	// writes.
	seedBatch = 200
	// seedCallTimeout bounds one node's part of one step of a seeding
	// (a whole SCAN, or one batch); the caller's context bounds the whole.
	seedCallTimeout = 30 * time.Second
	// reseedTimeout bounds a background re-seed.
	reseedTimeout = 2 * time.Minute
	// reseedBackoff is how long after a failed re-seed of a node the next
	// one may start.
	reseedBackoff = time.Second
)

// seedRetry is the back-off between attempts at reading the counters of
// the locks still pending in a seeding: doubling from a round trip,
// capped so that a seeding keeps going while a node restarts.
var seedRetry = driver.Backoff{Base: 10 * time.Millisecond, Cap: 500 * time.Millisecond}

func (d *Driver) stateKey() string { return d.prefix + ":fence-state" }

// FenceStates reads each node's fence state, in the order of the nodes
// given to New: "complete" when its fence counters can be trusted, "new"
// before the first grant of a first seeding, "seeding …" while a client
// copies counters into it, "" when it has none (it restarted without
// persistence and has not been re-seeded yet, or was never seeded). A
// deployment is whole again after a restart once every node says
// "complete": it then grants with any majority of its nodes. A node that
// does not answer within adminCallTimeout has "" and an error of its own,
// joined into the error returned.
func (d *Driver) FenceStates(ctx context.Context) ([]string, error) {
	states := make([]string, len(d.nodes))
	var errs []error
	for _, r := range d.each(ctx, nil, adminCallTimeout, func(ctx context.Context, n *node) reply {
		s, err := n.rdb.Get(ctx, d.stateKey()).Result()
		if errors.Is(err, redis.Nil) {
			return reply{}
		}
		states[n.idx] = s // each node its own index
		return reply{err: err}
	}) {
		errs = append(errs, r.err)
	}
	return states, errors.Join(errs...)
}

// describeState says what a node's fence state means, for errors.
func describeState(s string) string {
	switch {
	case s == "":
		return "has no fence state: restarted empty, or never seeded"
	case s == stateNew:
		return "is being seeded for the first time"
	case strings.HasPrefix(s, stateSeeding):
		return "restarted empty and is being re-seeded"
	case s == stateComplete:
		return "holds complete fence counters"
	}
	return fmt.Sprintf("has an unknown fence state %q", s)
}

// freshStates reports whether the nodes' states (all of them) allow a
// first seeding from every node's counters: no node is being re-seeded
// (it lost its counters after grants were made), and not some complete
// while others have no state (those lost theirs). Either every node is
// without state or new (a fresh deployment, an upgrade from a version
// without fence states, or a first seeding that stopped half-way), or
// every node is complete or new (a first seeding that stopped before
// marking every node complete).
func freshStates(states []string) bool {
	var complete, none bool
	for _, s := range states {
		switch s {
		case stateComplete:
			complete = true
		case "":
			none = true
		case stateNew:
		default:
			return false
		}
	}
	return !complete || !none
}

// setState runs fence_state.lua on node i; see there for what it returns.
func (d *Driver) setState(ctx context.Context, i int, op string, args ...any) (string, error) {
	return fenceState.Run(ctx, d.nodes[i].rdb, []string{d.stateKey()}, append([]any{op}, args...)...).Text()
}

// seedAll is the first seeding: with every node answering, and their
// states fresh (see freshStates), it marks the nodes without state new,
// copies the largest of every counter on all nodes to every node that is
// not complete, and marks those complete. It returns errNotFresh if the
// states do not allow it.
func (d *Driver) seedAll(ctx context.Context) error {
	states := make([]string, len(d.nodes))
	rs := d.each(ctx, nil, seedCallTimeout, func(ctx context.Context, n *node) reply {
		s, err := d.setState(ctx, n.idx, "new")
		states[n.idx] = s
		return reply{ok: true, err: err}
	})
	t := count(rs)
	if len(t.errs) > 0 || !freshStates(states) {
		// A node did not answer, or some node is complete and another lost
		// its counters: the nodes this call marked new must not pass for
		// nodes that never lost theirs.
		for i, s := range states {
			if s == "" && rs[i].err == nil {
				_, _ = d.setState(ctx, i, "unnew")
			}
		}
		if len(t.errs) > 0 {
			return fmt.Errorf("%w: redlock: seeding the nodes' fence counters needs every node: %w", driver.ErrUnavailable, errors.Join(t.errs...))
		}
		return errNotFresh
	}
	all := make([]int, len(d.nodes))
	for i := range all {
		all[i] = i
	}
	counters, err := d.readCounters(ctx, all, len(d.nodes), func(s string) bool { return s == stateNew || s == stateComplete })
	if err != nil {
		return err
	}
	var targets []int
	for i, s := range states {
		if s != stateComplete {
			targets = append(targets, i)
		}
	}
	return d.copyCounters(ctx, targets, counters, stateNew)
}

// seedJob is a first seeding under way.
type seedJob struct {
	done chan struct{}
	err  error
}

// seedAllShared runs seedAll in the background, one at a time per driver,
// and waits for it as long as ctx allows: a first seeding of many counters
// (an upgrade) may take longer than one acquire attempt, and then goes on
// for the next attempt to find done.
func (d *Driver) seedAllShared(ctx context.Context) error {
	d.bgMu.Lock()
	job := d.firstSeed
	if job == nil {
		if d.bgCtx.Err() != nil {
			d.bgMu.Unlock()
			return fmt.Errorf("%w: redlock: the driver is closed", driver.ErrUnavailable)
		}
		job = &seedJob{done: make(chan struct{})}
		d.firstSeed = job
		d.bg.Add(1)
		go func() {
			defer d.bg.Done()
			sctx, cancel := context.WithTimeout(d.bgCtx, reseedTimeout)
			job.err = d.seedAll(sctx)
			cancel()
			d.bgMu.Lock()
			d.firstSeed = nil
			d.bgMu.Unlock()
			close(job.done)
		}()
	}
	d.bgMu.Unlock()
	select {
	case <-job.done:
		return job.err
	case <-ctx.Done():
		return fmt.Errorf("%w: redlock: the nodes' fence counters are being seeded for the first time; try again: %w", driver.ErrUnavailable, ctx.Err())
	}
}

// errStateChanged: a node's fence state changed during a seeding of it
// (it restarted, or another client began a re-seed), and the node was
// left as it was.
var errStateChanged = errors.New("its fence state changed during the seeding")

var errNotFresh = fmt.Errorf("%w: redlock: the nodes' fence states do not allow a first seeding", driver.ErrUnavailable)

// reseed copies the counters into node x, which lost them: from a
// majority of complete nodes, the largest value of each; then marks x
// complete, unless it restarted again or another client took the re-seed
// over meanwhile. It does nothing while another client's re-seed of x is
// under way: the claim keeps many clients from copying at once.
func (d *Driver) reseed(ctx context.Context, x int) error {
	id := driver.NewNonce()
	var claimed string
	rs := d.each(ctx, []int{x}, seedCallTimeout, func(ctx context.Context, n *node) reply {
		s, err := d.setState(ctx, x, "seeding", id, reseedTimeout.Milliseconds())
		claimed = s
		return reply{ok: true, err: err}
	})
	if err := rs[x].err; err != nil {
		return err
	}
	if !strings.HasPrefix(claimed, stateSeeding+id+" ") {
		return nil // complete, or another client's re-seed is under way
	}
	var sources []int
	for i := range d.nodes {
		if i != x {
			sources = append(sources, i)
		}
	}
	counters, err := d.readCounters(ctx, sources, d.quorum, func(s string) bool { return s == stateComplete })
	if err != nil {
		return err
	}
	return d.copyCounters(ctx, []int{x}, counters, claimed)
}

// readCounters returns, for every lock that has a fence counter or a lock
// key on one of the source nodes, the largest counter on at least need
// source nodes whose fence state is trusted, read in one step with that
// state. The keys are found by SCAN, which returns every key present for
// the whole scan: a grant between its rounds has its lock (token 0), or
// its permit (token 0, see semaphore.go), on each node whose confirmation
// it counts, from before the seeding began until its second round, so it
// is found, and its lock or permit is read again until the second round
// is done there (or it is gone, and the grant fails there).
func (d *Driver) readCounters(ctx context.Context, sources []int, need int, trusted func(string) bool) (map[string]int64, error) {
	var mu sync.Mutex
	found := map[string]bool{}
	rs := d.each(ctx, sources, seedCallTimeout, func(ctx context.Context, n *node) reply {
		// Found by their fence keys: every fence key, and the lock keys of
		// the hashed layout. (A compat=setnx lock key is the name itself,
		// which no pattern finds; its first round creates its fence key,
		// see acquire.lua.)
		for _, pattern := range []string{d.prefix + ":{*}:fence", d.prefix + ":{*}:lock", redisscript.SetNXFencePattern(d.prefix)} {
			it := n.rdb.Scan(ctx, 0, pattern, 1000).Iterator()
			for it.Next(ctx) {
				fence := it.Val()
				if b, ok := strings.CutSuffix(fence, "}:lock"); ok {
					fence = b + "}:fence"
				}
				mu.Lock()
				found[fence] = true
				mu.Unlock()
			}
			if err := it.Err(); err != nil {
				return reply{err: err}
			}
		}
		return reply{ok: true}
	})
	t := count(rs)
	if t.ok < need {
		return nil, d.seedSourcesErr(ctx, "scan", t, need)
	}
	scanned := t.okIdx
	pending := make([]string, 0, len(found))
	for b := range found {
		pending = append(pending, b)
	}
	slices.Sort(pending)
	out := make(map[string]int64, len(pending))
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt > 0 {
			wait := time.NewTimer(seedRetry.Delay(attempt))
			select {
			case <-ctx.Done():
				wait.Stop()
				return nil, ctx.Err()
			case <-wait.C:
			}
		}
		counters := make([][]int64, len(d.nodes))
		between := make([][]bool, len(d.nodes))
		rs := d.each(ctx, scanned, seedCallTimeout, func(ctx context.Context, n *node) reply {
			cs, bs := make([]int64, 0, len(pending)), make([]bool, 0, len(pending))
			for chunk := range slices.Chunk(pending, seedBatch) {
				keys := make([]string, 1, 1+4*len(chunk))
				keys[0] = d.stateKey()
				for _, fence := range chunk {
					permits, holders := redisscript.PermitsOfFence(d.prefix, fence)
					if permits == "" {
						// No semaphore: the fence key, a counter, which
						// read_counters.lua passes over as not a sorted set.
						permits, holders = fence, fence
					}
					keys = append(keys, fence, redisscript.LockOfFence(d.prefix, fence), permits, holders)
				}
				v, err := readCounters.Run(ctx, n.rdb, keys).Slice()
				if err != nil {
					return reply{err: err}
				}
				if len(v) != 1+2*len(chunk) {
					return reply{err: fmt.Errorf("unexpected script reply of %d values", len(v))}
				}
				if s, _ := v[0].(string); !trusted(s) {
					return reply{} // its counters do not count
				}
				for j := 1; j < len(v); j += 2 {
					c, _ := v[j].(int64)
					f, _ := v[j+1].(int64)
					cs, bs = append(cs, c), append(bs, f == 1)
				}
			}
			counters[n.idx], between[n.idx] = cs, bs
			return reply{ok: true}
		})
		t := count(rs)
		if t.ok < need {
			return nil, d.seedSourcesErr(ctx, "read the fence counters", t, need)
		}
		var still []string
		for j, b := range pending {
			var m int64
			again := false
			for _, i := range t.okIdx {
				m = max(m, counters[i][j])
				again = again || between[i][j]
			}
			if again {
				still = append(still, b)
			} else {
				out[b] = max(out[b], m)
			}
		}
		pending = still
	}
	return out, nil
}

// seedSourcesErr is the error when too few nodes could be read for a
// seeding.
func (d *Driver) seedSourcesErr(ctx context.Context, what string, t tally, need int) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w: redlock: seeding fence counters: %s: %d nodes with complete counters answered, %d are needed: %w",
		driver.ErrUnavailable, what, t.ok, need, errors.Join(t.errs...))
}

// copyCounters raises the counters on each target node (never lowering
// one: a grant may have raised it meanwhile), then marks the node
// complete if its state is still from.
func (d *Driver) copyCounters(ctx context.Context, targets []int, counters map[string]int64, from string) error {
	fences := make([]string, 0, len(counters))
	for f := range counters {
		fences = append(fences, f)
	}
	slices.Sort(fences)
	rs := d.each(ctx, targets, seedCallTimeout, func(ctx context.Context, n *node) reply {
		for chunk := range slices.Chunk(fences, seedBatch) {
			keys, args := make([]string, len(chunk)), make([]any, len(chunk))
			for j, fence := range chunk {
				keys[j], args[j] = fence, counters[fence]
			}
			if err := raiseCounters.Run(ctx, n.rdb, keys, args...).Err(); err != nil {
				return reply{err: err}
			}
		}
		s, err := d.setState(ctx, n.idx, "complete", from)
		if err == nil && s != from && s != stateComplete { // complete: another client's seeding finished first
			err = fmt.Errorf("%w (it %s)", errStateChanged, describeState(s))
		}
		return reply{ok: err == nil, err: err}
	})
	if t := count(rs); len(t.errs) > 0 {
		return fmt.Errorf("%w: redlock: seeding fence counters: %w", driver.ErrUnavailable, errors.Join(t.errs...))
	}
	return nil
}

// reseedLater re-seeds node i in the background, unless that is already
// under way or failed less than reseedBackoff ago.
func (d *Driver) reseedLater(i int) {
	n := d.nodes[i]
	if time.Now().UnixNano() < n.reseedAfter.Load() || !n.reseeding.CompareAndSwap(false, true) {
		return
	}
	d.bgMu.Lock()
	defer d.bgMu.Unlock()
	if d.bgCtx.Err() != nil {
		n.reseeding.Store(false)
		return
	}
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		defer n.reseeding.Store(false)
		ctx, cancel := context.WithTimeout(d.bgCtx, reseedTimeout)
		defer cancel()
		if err := d.reseed(ctx, i); err != nil {
			n.reseedAfter.Store(time.Now().Add(reseedBackoff).UnixNano())
			if d.bgCtx.Err() == nil {
				slog.Default().WarnContext(ctx, "dlock: redlock: re-seeding a node's fence counters failed; a later acquire tries again",
					"node", n.where, "error", err)
			}
		}
	}()
}
