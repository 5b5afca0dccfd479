package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/driver"
)

// MinTTL is the shortest lease granted: the lease must outlast two rounds
// to a majority and the drift allowance.
const MinTTL = 100 * time.Millisecond

// Drift is the clock-drift allowance subtracted from a grant's validity:
// 1% of the TTL plus 2ms, as in the Redlock description.
func Drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// adminCallTimeout bounds one node's part of a call that holds no lease
// (ping, release, inspect, break): no TTL bounds those, and a node slower
// than this counts as failed, so the quorum answers without it.
const adminCallTimeout = 5 * time.Second

// nodeTimeout bounds one call to one node.
func nodeTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl/5, 50*time.Millisecond), 2*time.Second)
}

// Driver is the Redlock backend. It is safe for concurrent use.
type Driver struct {
	nodes    []*node
	quorum   int
	prefix   string
	keyCache *redisscript.KeyCache
	layout   redisscript.Layout
	closeRDB bool
	err      error
	// evictionAllowed: Open accepts nodes whose maxmemory-policy may
	// evict keys.
	evictionAllowed bool

	// Background seedings (seed.go): bgCtx ends at Close, which waits
	// for them; bgMu orders their start with Close, and guards firstSeed,
	// the first seeding under way.
	bgCtx     context.Context
	bgCancel  context.CancelFunc
	bgMu      sync.Mutex
	bg        sync.WaitGroup
	firstSeed *seedJob
}

type node struct {
	idx   int
	rdb   redis.UniversalClient
	where string
	hub   *redisscript.Hub
	db    int
	// keyspace: the node announces deletions and expiries (compat=setnx:
	// see setnx.go).
	keyspace bool

	reseeding   atomic.Bool  // a background re-seed of this node is under way
	reseedAfter atomic.Int64 // no re-seed before this time (Unix ns), after a failed one
}

// Option configures a Driver made by New.
type Option func(*Driver) error

// WithPrefix sets the first part of every key (default "dlock"); it may
// not contain '{' or '}'.
func WithPrefix(p string) Option {
	return func(d *Driver) error {
		d.prefix = p
		return nil
	}
}

// WithEvictionAllowed makes Open accept nodes whose maxmemory-policy may
// evict keys (volatile-*, allkeys-*), which it refuses otherwise (URL:
// allow_eviction=true): a node may then drop a held lock under memory
// pressure, as a node restarted empty does (see the package
// documentation).
func WithEvictionAllowed() Option {
	return func(d *Driver) error {
		d.evictionAllowed = true
		return nil
	}
}

// WithCompat selects a compatible layout (URL: compat=setnx): "setnx"
// locks, on each node, the key named by the lock name itself, with SET NX
// PX, as redlock-py and redsync's Redlock do, so that their locks and
// dlock's exclude each other. See the package documentation.
func WithCompat(layout string) Option {
	return func(d *Driver) error {
		l, err := redisscript.ParseLayout("redlock", layout)
		d.layout = l
		return err
	}
}

// New returns a driver over independent Redis nodes (not replicas of each
// other). A lock is held when a majority of them hold it; use an odd
// number, at least 3. Close does not close the clients. Create them with
// ContextTimeoutEnabled set, as Open does: go-redis ignores a context's
// deadline otherwise, and a silent node then costs its read timeout instead
// of the driver's per-call bound (TestOpenBoundsEachNodeCall). Its errors
// wrap dlock.ErrInvalidOption.
func New(nodes []redis.UniversalClient, opts ...Option) (*Driver, error) {
	d := &Driver{prefix: redisscript.DefaultPrefix, quorum: len(nodes)/2 + 1}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(d); err != nil {
			return nil, err
		}
	}
	d.bgCtx, d.bgCancel = context.WithCancel(context.Background())
	d.keyCache = redisscript.NewKeyCache(d.prefix, d.layout)
	for i, rdb := range nodes {
		n := &node{idx: i, rdb: rdb, where: fmt.Sprintf("node %d", i), hub: redisscript.NewHub(rdb, "")}
		if c, ok := rdb.(*redis.Client); ok {
			n.where, n.db = c.Options().Addr, c.Options().DB
		}
		d.nodes = append(d.nodes, n)
	}
	if err := redisscript.CheckPrefix(d.prefix); err != nil {
		d.err = fmt.Errorf("%w: redlock: %v", dlock.ErrInvalidOption, err)
	} else if len(nodes) == 0 {
		d.err = fmt.Errorf("%w: redlock: no nodes", dlock.ErrInvalidOption)
	}
	if d.err != nil {
		return nil, d.err
	}
	return d, nil
}

func (d *Driver) keys(name string) redisscript.Keys { return *d.keyCache.Get(name) }

// Capabilities: semaphores (not in compat=setnx, whose foreign clients
// know none), no fair queue, no sessions, no durable fencing (see the
// package documentation).
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Semaphore: d.layout != redisscript.SetNX, MinTTL: MinTTL}
}

// reply is one node's answer.
type reply struct {
	done bool // the call was made (false: node not asked)
	ok   bool
	n    int64
	err  error
}

// each calls fn on the nodes whose index is in which (all if nil), in
// parallel, each bounded by timeout, and returns their replies by index.
func (d *Driver) each(ctx context.Context, which []int, timeout time.Duration, fn func(context.Context, *node) reply) []reply {
	if which == nil {
		which = make([]int, len(d.nodes))
		for i := range which {
			which[i] = i
		}
	}
	out := make([]reply, len(d.nodes))
	var wg sync.WaitGroup
	for _, i := range which {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			r := fn(nctx, d.nodes[i])
			r.done = true
			if r.err != nil {
				r.err = redisscript.Unavailable(ctx, d.nodes[i].where, r.err)
			}
			out[i] = r
		}()
	}
	wg.Wait()
	return out
}

// tally counts the replies.
type tally struct {
	ok, refused int // refused: answered, but not ok
	errs        []error
	okIdx       []int
}

func count(rs []reply) tally {
	var t tally
	for i, r := range rs {
		switch {
		case !r.done:
		case r.err != nil:
			t.errs = append(t.errs, r.err)
		case r.ok:
			t.ok++
			t.okIdx = append(t.okIdx, i)
		default:
			t.refused++
		}
	}
	return t
}

// unreachable is the error when too few nodes answered to decide
// (driver.Classify: ctx's error if that is why).
func (d *Driver) unreachable(ctx context.Context, what string, t tally) error {
	return driver.Classify(ctx, "", fmt.Errorf("%w: redlock: %s: %d of %d nodes answered, a majority (%d) is needed: %w",
		driver.ErrUnavailable, what, len(d.nodes)-len(t.errs), len(d.nodes), d.quorum, errors.Join(t.errs...)))
}

// Acquire takes the lock on a majority, waiting if req.Wait.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if d.err != nil {
		return driver.Grant{}, d.err
	}
	if req.Fair {
		return driver.Grant{}, fmt.Errorf("%w: redlock has no fair queue", driver.ErrUnsupported)
	}
	if err := d.layout.CheckName(d.prefix, req.Name); err != nil {
		return driver.Grant{}, err
	}
	if req.Limit > 1 && d.layout == redisscript.SetNX {
		return driver.Grant{}, fmt.Errorf("%w: redlock compat=setnx: semaphores (the other libraries lock a key with one holder)", driver.ErrUnsupported)
	}
	return driver.AcquireByRetry(ctx, req, d)
}

// TryAcquire makes one two-round attempt (driver.Retrier); see the package
// documentation.
func (d *Driver) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, time.Duration, error) {
	if req.Limit > 1 {
		return d.tryPermit(ctx, req)
	}
	k := d.keys(req.Name)
	timeout := nodeTimeout(req.TTL)
	for seeds := 0; ; seeds++ {
		start := driver.Now()
		round1 := make([]redisscript.RoundOne, len(d.nodes))
		r1 := d.each(ctx, nil, timeout, func(ctx context.Context, n *node) reply {
			r, err := k.AcquireRead(ctx, n.rdb, req.Owner, req.TTL, req.Holder, d.stateKey())
			round1[n.idx] = r
			return reply{ok: r.Granted, n: r.PTTL, err: err}
		})
		t1 := count(r1)
		if again, err := d.checkStates(ctx, req.Name, r1, round1, seeds, func() { d.abandon(ctx, k, req) }); again {
			continue
		} else if err != nil {
			return driver.Grant{}, 0, err
		}
		if t1.ok < d.quorum {
			d.abandon(ctx, k, req)
			if len(t1.errs) > len(d.nodes)-d.quorum {
				return driver.Grant{}, 0, d.unreachable(ctx, "acquire "+req.Name, t1)
			}
			return driver.Grant{}, retryAfter(r1, t1, d.quorum), driver.ErrNotAcquired
		}
		// The token is above every counter read, on a majority of complete
		// nodes at least (and on the others: higher does no harm).
		var token uint64
		for i, r := range r1 {
			if r.done && r.err == nil {
				token = max(token, uint64(round1[i].Counter))
			}
		}
		token++

		// Round 2 goes to every node that answered round 1, those that
		// refused too (the lock there is another's): their counters are
		// raised as well, so that the latest counter is on as many nodes as
		// can be reached.
		var answered []int
		for i, r := range r1 {
			if r.done && r.err == nil {
				answered = append(answered, i)
			}
		}
		r2 := d.each(ctx, answered, timeout, func(ctx context.Context, n *node) reply {
			ok, err := k.SetToken(ctx, n.rdb, req.Owner, token)
			return reply{ok: ok, err: err}
		})
		t2 := count(r2)
		validity := req.TTL - driver.Since(start) - Drift(req.TTL)
		if t2.ok < d.quorum || validity <= 0 {
			d.abandon(ctx, k, req)
			if t2.ok < d.quorum && len(t2.errs) > 0 {
				return driver.Grant{}, 0, d.unreachable(ctx, "acquire "+req.Name, t2)
			}
			// The lock expired on nodes before the rounds were done: the TTL
			// is too short for these nodes' latency. Try again.
			return driver.Grant{}, driver.Jitter(expiredRetry), driver.ErrNotAcquired
		}
		return driver.Grant{Token: token, Since: start, TTL: req.TTL - Drift(req.TTL)}, 0, nil
	}
}

// checkStates decides, from the fence states read in a round 1, whether
// its counters may decide a token: a majority of the nodes must hold
// complete counters. If not, it calls abandon and returns the error, or
// seeds a fresh deployment first (if the acquire has seeded fewer than
// firstSeedTries times) and returns again, to repeat round 1. Nodes
// without complete counters are re-seeded in the background.
func (d *Driver) checkStates(ctx context.Context, name string, r1 []reply, round1 []redisscript.RoundOne, seeds int, abandon func()) (again bool, err error) {
	t1 := count(r1)
	complete, states := 0, make([]string, 0, len(d.nodes))
	for i, r := range r1 {
		if r.done && r.err == nil {
			states = append(states, round1[i].State)
			if round1[i].State == stateComplete {
				complete++
			}
		}
	}
	if complete < d.quorum {
		abandon()
		if len(t1.errs) > len(d.nodes)-d.quorum {
			return false, d.unreachable(ctx, "acquire "+name, t1)
		}
		// A fresh deployment: seed every node, then try again. (A node
		// whose state another client changed meanwhile, e.g. by a
		// re-seed once the others were complete, is left to it: the
		// next round 1 reads the states as they are.)
		if seeds < firstSeedTries && len(states) == len(d.nodes) && freshStates(states) {
			err := d.seedAllShared(ctx)
			if err == nil || errors.Is(err, errStateChanged) {
				return true, nil
			}
			if !errors.Is(err, errNotFresh) {
				return false, err
			}
		}
		return false, d.unseeded(ctx, name, r1, round1, complete)
	}
	for i, r := range r1 {
		if r.done && r.err == nil && round1[i].State != stateComplete {
			d.reseedLater(i)
		}
	}
	return false, nil
}

// firstSeedTries bounds the first seedings one acquire asks for. Clients
// that start together on fresh nodes seed at once; one whose seeding
// failed (a node slow to answer) takes back the marks it made, and
// another's seeding, or the round 1 after it, may then find the nodes
// without state again: that acquire seeds again rather than fail.
const firstSeedTries = 3

// unseeded is the error when a majority of the nodes answered but fewer
// than a majority hold complete fence counters: a token read from them
// could repeat an earlier one.
func (d *Driver) unseeded(ctx context.Context, name string, rs []reply, round1 []redisscript.RoundOne, complete int) error {
	var why []string
	for i, r := range rs {
		if r.done && r.err == nil && round1[i].State != stateComplete {
			why = append(why, fmt.Sprintf("%s %s", d.nodes[i].where, describeState(round1[i].State)))
		}
	}
	t := count(rs)
	err := fmt.Errorf("%w: redlock: acquire %s: %d of %d nodes reachable but only %d holds its fence counters (%s); waiting for a majority (%d) of nodes with complete counters, so that no token repeats",
		driver.ErrUnavailable, name, len(d.nodes)-len(t.errs), len(d.nodes), complete, strings.Join(why, "; "), d.quorum)
	if len(t.errs) > 0 {
		err = fmt.Errorf("%w: %w", err, errors.Join(t.errs...))
	}
	return err
}

// retryAfter is when a failed attempt should look again: when the holder's
// lock has expired on enough nodes for a majority to be free; or soon, with
// jitter, after a split vote where nobody won a majority.
func retryAfter(rs []reply, t tally, quorum int) time.Duration {
	var pttls []int64
	for _, r := range rs {
		if r.done && r.err == nil && !r.ok && r.n > 0 {
			pttls = append(pttls, r.n)
		}
	}
	slices.Sort(pttls)
	// With f free nodes, quorum-f more must expire; they expire in order.
	if need := quorum - t.ok; need > 0 && need <= len(pttls) {
		return time.Duration(pttls[need-1]) * time.Millisecond
	}
	return driver.Jitter(unknownExpiryRetry)
}

const (
	// expiredRetry is the pause before acquiring again when the lock expired
	// on some nodes while the rounds ran: short, since the next try may
	// well be quick enough.
	expiredRetry = 5 * time.Millisecond
	// unknownExpiryRetry is the pause when no node's remaining TTL says when
	// the lock frees: about one round trip to a loopback or LAN node.
	unknownExpiryRetry = 10 * time.Millisecond
)

// abandon releases a partial or late acquire on every node (a node may
// have set the lock although its reply was lost).
func (d *Driver) abandon(ctx context.Context, k redisscript.Keys, req driver.Request) {
	d.each(context.WithoutCancel(ctx), nil, nodeTimeout(req.TTL), func(ctx context.Context, n *node) reply {
		_, err := k.Release(ctx, n.rdb, req.Owner, redisscript.WakeAny)
		return reply{err: err}
	})
}

// Extend renews the lock on every node that still holds it; it succeeds
// when a majority did. The nodes are given ttl plus the drift allowance,
// since the lease's deadline was computed with it taken off.
func (d *Driver) Extend(ctx context.Context, h driver.Held, ttl time.Duration) error {
	k := d.keys(h.Name)
	rs := d.each(ctx, nil, nodeTimeout(ttl), func(ctx context.Context, n *node) reply {
		var ok bool
		var err error
		if p, isPermit := h.Handle.(permit); isPermit {
			ok, err = k.ExtendSlot(ctx, n.rdb, h.Owner, p.slot, ttl+Drift(ttl))
		} else {
			ok, err = k.Extend(ctx, n.rdb, h.Owner, ttl+Drift(ttl))
		}
		return reply{ok: ok, err: err}
	})
	t := count(rs)
	switch {
	case t.ok >= d.quorum:
		return nil
	case t.refused > len(d.nodes)-d.quorum:
		return fmt.Errorf("%w: redlock: %q is held by this owner on %d of %d nodes only", driver.ErrLeaseLost, h.Name, t.ok, len(d.nodes))
	}
	return d.unreachable(ctx, "extend "+h.Name, t)
}

// Release deletes the lock on every node that holds it for this owner.
func (d *Driver) Release(ctx context.Context, h driver.Held) error {
	k := d.keys(h.Name)
	rs := d.each(ctx, nil, adminCallTimeout, func(ctx context.Context, n *node) reply {
		var ok bool
		var err error
		if p, isPermit := h.Handle.(permit); isPermit {
			ok, err = k.ReleaseSlot(ctx, n.rdb, h.Owner, p.slot)
		} else {
			ok, err = k.Release(ctx, n.rdb, h.Owner, redisscript.WakeAny)
		}
		return reply{ok: ok, err: err}
	})
	t := count(rs)
	switch {
	case t.refused > len(d.nodes)-d.quorum:
		return fmt.Errorf("%w: redlock: %q was held by this owner on %d of %d nodes only", driver.ErrLeaseLost, h.Name, t.ok, len(d.nodes))
	case t.ok < d.quorum && len(t.errs) > 0:
		return d.unreachable(ctx, "release "+h.Name, t)
	}
	return nil
}

// subscribeTimeout bounds the wait for a majority of SUBSCRIBE confirmations.
const subscribeTimeout = 5 * time.Second

// Subscribe listens for releases of name on every node's shared pub/sub
// connection (driver.Subscriber), and returns once a majority confirmed:
// every release publishes on all the nodes that held the lock, a majority,
// so one of them is always heard.
func (d *Driver) Subscribe(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	k := d.keys(name)
	wake := make(chan struct{}, 1)
	var mu sync.Mutex
	var stops []func()
	stopped := false
	stopAll := func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		for _, s := range stops {
			s()
		}
		stops = nil
	}
	readyc := make(chan error, len(d.nodes))
	for _, n := range d.nodes {
		go func() {
			readyc <- d.subscribeNode(ctx, n, k, wake, func(stop func()) {
				mu.Lock()
				defer mu.Unlock()
				if stopped {
					stop()
				} else {
					stops = append(stops, stop)
				}
			})
		}()
	}
	var errs []error
	for confirmed := 0; confirmed < d.quorum; {
		err := <-readyc
		if err == nil {
			confirmed++
			continue
		}
		if errs = append(errs, err); len(errs) > len(d.nodes)-d.quorum {
			stopAll()
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			return nil, nil, d.unreachable(ctx, "subscribe "+name, tally{errs: errs})
		}
	}
	if d.layout == redisscript.SetNX && !d.allKeyspace() {
		// A foreign release on a node that does not announce it is
		// learnt by polling (see setnx.go).
		stop := redisscript.PollWake(wake, redisscript.SetNXPoll)
		mu.Lock()
		stops = append(stops, stop)
		mu.Unlock()
	}
	return wake, stopAll, nil
}

// subscribeNode subscribes wake to the channels of k on node n: the
// lock's channel, and in compat=setnx the key's keyspace channel if n
// announces deletions and expiries. keep is given each stop, as soon as
// there is one.
func (d *Driver) subscribeNode(ctx context.Context, n *node, k redisscript.Keys, wake chan struct{}, keep func(stop func())) error {
	channels := []string{k.Channel}
	if d.layout == redisscript.SetNX && n.keyspace {
		channels = append(channels, redisscript.KeyspaceChannel(n.db, k.Lock))
	}
	for _, c := range channels {
		ready, stop, err := n.hub.Subscribe(context.WithoutCancel(ctx), c, "", wake)
		if err != nil {
			return redisscript.Unavailable(ctx, n.where, err)
		}
		keep(stop)
		if err := redisscript.WaitReady(ctx, subscribeTimeout, ready); err != nil {
			return redisscript.Unavailable(ctx, n.where, err)
		}
	}
	return nil
}

// Inspect reports the holder that a majority of nodes agree on, or the
// permits of a semaphore that a majority agree on.
func (d *Driver) Inspect(ctx context.Context, name string) (driver.Info, error) {
	if d.err != nil {
		return driver.Info{}, d.err
	}
	if err := d.layout.CheckName(d.prefix, name); err != nil {
		return driver.Info{}, err
	}
	k := d.keys(name)
	read := k.Read
	if d.layout == redisscript.SetNX {
		read = k.ReadSetNX
	}
	states := make([]redisscript.State, len(d.nodes))
	rs := d.each(ctx, nil, adminCallTimeout, func(ctx context.Context, n *node) reply {
		st, err := read(ctx, n.rdb)
		if err == nil {
			states[n.idx] = st
		}
		return reply{ok: true, err: err}
	})
	if t := count(rs); t.ok < d.quorum {
		return driver.Info{}, d.unreachable(ctx, "inspect "+name, t)
	}
	byOwner := map[string][]int{}
	for i, st := range states {
		if rs[i].err == nil && st.Held {
			byOwner[st.Value.Owner] = append(byOwner[st.Value.Owner], i)
		}
	}
	for _, idx := range byOwner {
		if len(idx) < d.quorum {
			continue
		}
		var pttls []time.Duration
		in := driver.Info{Name: name, Held: true}
		for _, i := range idx {
			st := states[i]
			in.Token, in.Holder = max(in.Token, st.Value.Token), st.Value.Holder
			if st.Foreign {
				in.Holder = redisscript.ForeignHolder
			}
			pttls = append(pttls, st.PTTL)
		}
		// The lock is held until all but quorum-1 of these have expired.
		slices.Sort(pttls)
		in.ExpiresIn = pttls[len(pttls)-d.quorum]
		return in, nil
	}
	return d.permitsInfo(name, rs, states), nil
}

// List reports the locks and semaphores held on a majority whose names
// start with prefix, by a SCAN of every node.
func (d *Driver) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	if d.err != nil {
		return nil, d.err
	}
	seen := map[string]bool{}
	var names []string
	var errs []error
	for _, n := range d.nodes {
		var ns []string
		var err error
		if d.layout == redisscript.SetNX {
			ns, err = redisscript.ScanSetNX(ctx, n.rdb, d.prefix, prefix)
		} else {
			ns, err = redisscript.ScanNamesAndSemaphores(ctx, n.rdb, d.prefix)
		}
		if err != nil {
			errs = append(errs, redisscript.Unavailable(ctx, n.where, err))
			continue
		}
		for _, name := range ns {
			if !seen[name] && strings.HasPrefix(name, prefix) {
				seen[name] = true
				names = append(names, name)
			}
		}
	}
	if len(errs) > len(d.nodes)-d.quorum {
		return nil, d.unreachable(ctx, "list", tally{errs: errs})
	}
	return driver.ListByInspect(ctx, names, d.Inspect)
}

// Break deletes the lock, or the permits of a semaphore, on every node,
// whoever holds them, and wakes the waiters; the counters are kept, so the next grant's token is higher. It
// succeeds only when a majority of nodes answered (each either deleted
// the lock or did not have it): then no majority holds it any more, and
// the holder's next renewal fails. Otherwise it returns ErrUnavailable
// naming the nodes that did not answer, since the lock may still be held
// on a majority.
func (d *Driver) Break(ctx context.Context, name string) error {
	if d.err != nil {
		return d.err
	}
	if err := d.layout.CheckName(d.prefix, name); err != nil {
		return err
	}
	k := d.keys(name)
	rs := d.each(ctx, nil, adminCallTimeout, func(ctx context.Context, n *node) reply {
		ok, err := k.Break(ctx, n.rdb, redisscript.WakeAny)
		if err == nil && d.layout != redisscript.SetNX {
			// The name's permits too, if it is a semaphore.
			var freed bool
			freed, err = k.BreakSlots(ctx, n.rdb)
			ok = ok || freed
		}
		return reply{ok: ok, err: err}
	})
	t := count(rs)
	switch {
	case t.ok+t.refused < d.quorum:
		return driver.Classify(ctx, "", fmt.Errorf("%w: redlock: break %s: deleted on %d of %d nodes, free on %d, and %d did not answer: a majority (%d) must answer, so the lock may still be held: %w",
			driver.ErrUnavailable, name, t.ok, len(d.nodes), t.refused, len(t.errs), d.quorum, errors.Join(t.errs...)))
	case t.ok > 0:
		return nil
	}
	return fmt.Errorf("%w: redlock: %q is free", driver.ErrNotHeld, name)
}

// allKeyspace reports whether every node announces deletions and
// expiries.
func (d *Driver) allKeyspace() bool {
	for _, n := range d.nodes {
		if !n.keyspace {
			return false
		}
	}
	return true
}

// Close closes the pub/sub connections, and the clients if the driver was
// opened from a URL.
func (d *Driver) Close() error {
	d.bgMu.Lock()
	d.bgCancel()
	d.bgMu.Unlock()
	d.bg.Wait()
	var errs []error
	for _, n := range d.nodes {
		errs = append(errs, n.hub.Close())
		if d.closeRDB {
			errs = append(errs, n.rdb.Close())
		}
	}
	return errors.Join(errs...)
}

var (
	_ driver.Driver     = (*Driver)(nil)
	_ driver.Retrier    = (*Driver)(nil)
	_ driver.Subscriber = (*Driver)(nil)
)
