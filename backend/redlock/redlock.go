// Package redlock is dlock's Redlock backend: a lock held on a majority of
// N independent Redis nodes (no replication between them), so that it
// survives the loss of a minority of them.
//
//	import _ "github.com/dlock/dlock/backend/redlock"
//	c, err := dlock.Open(ctx, "redlock://:pass@h1:6379,h2:6379,h3:6379/0")
//
// or, over clients you already have,
// redlock.New([]redis.UniversalClient{n1, n2, n3}) and dlock.New.
//
// # Mechanism
//
// It runs the Redis backend's scripts (backend/internal/redisscript) on
// every node in parallel. An acquire is two rounds:
//
//  1. On every node: if the lock key is absent, set it with PX = TTL and
//     report the node's fence counter. The lock is won if a majority
//     granted it.
//  2. The token is one more than the largest counter those nodes reported;
//     on each of them, store it in the lock and raise the fence counter to
//     it (owner-checked). A majority must confirm. The counter alone is
//     raised on the nodes that answered round 1 but refused (the lock there
//     is another's, e.g. a stale one a release did not reach).
//
// The grant is valid for TTL − elapsed − drift, where elapsed is the time
// since round 1 was sent and drift = TTL/100 + 2ms allows for the nodes'
// clocks running faster than ours; the lease's deadline (Lease.Expires)
// is set accordingly. If fewer than a majority grant, or the validity is
// used up, the lock is released on all nodes and the attempt fails. Each
// node call is bounded by a timeout (TTL/5, within 50ms..2s), so a dead or
// frozen node costs one timeout, not the lease.
//
// Renewal extends the lock on every node that still holds it and succeeds
// on a majority. Release deletes it on all nodes and publishes a wake-up on
// each; waiters subscribe on every node (one shared pub/sub connection per
// node) and need a majority of subscriptions before they wait.
//
// Break deletes the lock on every node, whoever holds it, and succeeds only
// if a majority of nodes answered (deleted it, or did not have it): then no
// majority holds it, and the holder's next renewal fails. A Break that
// reaches fewer nodes returns ErrUnavailable naming the nodes that did not
// answer: the holder may still renew on a majority.
//
// # What the fencing token guarantees
//
// The token is strictly greater than that of every earlier grant whose
// round 2 completed, as long as no node loses its data: a grant's round 2
// wrote its token into the counters of a majority W, the next grant's
// round 1 reads the counters of a majority R, and W and R share at least
// one node. On that node the order is fixed by the lock itself: round 2
// of the earlier grant ran while its lock was there (it is owner-checked),
// and the later grant could only set its lock after that lock was gone. So
// the token order does not depend on any clock: a node whose clock jumps,
// or a holder paused by GC past its TTL, can break mutual exclusion but
// not the order of tokens.
//
// What breaks it: a node that restarts without persistence (or fails over
// to a replica that had not yet received the counter) forgets both its
// locks and its counters. Since round 2 raises the counter on every node
// that answered round 1, a grant made while all nodes answered leaves its
// counter on all of them, and then any one node may restart empty: the
// next majority still includes a node with the counter (the tests restart
// each node of three in turn, with grants in between, and check that
// tokens increase). It is not
// harmless in general: combined with a node that missed grants, a node
// restarted empty makes tokens repeat. For example, with n1 cut off, a
// grant on {n2, n3} gets token 11 (n1 still has 10); n3 restarts empty;
// with n2 now down, a grant on {n1, n3} reads 10 and 0 and issues 11
// again (TestTokenRepeatsAfterPartitionThenEmptyRestart). A majority of
// nodes restarted empty restarts tokens at 1. A node restarted empty can
// also break mutual exclusion: its lock is gone, so another client can win
// it plus one more node whose lock expired or was lost. Run nodes with
// appendonly yes and appendfsync always, and maxmemory-policy noeviction:
// a node that evicts a held lock, or (allkeys-*) a counter, is a node that
// lost data in the sense above, so Open refuses nodes with an evicting
// policy unless allow_eviction=true (as the Redis backend does; where
// CONFIG is disabled it logs a warning). Restarting an empty node only
// after the longest TTL in use has passed (antirez's "delayed restart")
// protects the locks, not the counters. Capabilities().DurableFencing is
// false, since dlock cannot see how the nodes persist.
//
// # The debate, and what dlock does about it
//
// Martin Kleppmann ("How to do distributed locking", 2016) argued that
// Redlock is unsafe for correctness: it assumes bounded network delay,
// bounded process pauses and bounded clock error, and a GC pause or a clock
// jump lets two clients hold the lock at once; and that Redlock has no
// fencing token, so the resource cannot refuse the stale client. Salvatore
// Sanfilippo (antirez, "Is Redlock safe?") replied that clocks need only a
// bounded rate error (use monotonic time, no NTP steps), that the elapsed
// time is measured after acquiring so delays during the acquire are
// accounted for, that a pause after the check is a problem for every lease
// system including those with fencing, and that a random unique value
// with check-and-set at the resource can play the role of a token. Both
// are right about something: a lease cannot protect against a client that
// is paused after checking it, and only the resource can — with a token it
// can compare.
//
// dlock therefore gives Redlock what it lacked: a fencing token that
// increases across grants (above, with its limits stated), and loss
// detection — Lease.Done closes, and a Do callback's context is cancelled,
// when the deadline (send time of the last renewal confirmed by a majority
// + TTL − drift margins, on the monotonic clock) passes. The lease's TTL
// still depends on clocks running at nearly the same rate; the token does
// not. For correctness, have the resource check the token; for efficiency
// (avoiding duplicate work), the lease alone is enough.
//
// # URL
//
//	redlock://[user:password@]host1:port1,host2:port2,host3:port3[/db][?param=value&...]
//	redlocks://...  (TLS to every node)
//
// The user (an ACL user, or none for the default user), password, database
// and go-redis parameters (dial_timeout, read_timeout, ...) apply to every
// node, and so do the TLS parameters of redlocks:// (as for the Redis
// backend's rediss://; each node's certificate is checked against its own
// host name). The parameters — prefix, allow_eviction, the TLS parameters
// (ca, cert, key, server_name, skip_verify) and go-redis's — are
// described in the README's table of URL parameters,
// https://github.com/dlock/dlock#url-parameters.
//
// IPv6 nodes cannot be written in the URL (Go's URL parser
// accepts one bracketed host only); use New. Passwords never appear in
// errors.
package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/clock"
)

// MinTTL is the shortest lease granted: the lease must outlast two rounds
// to a majority and the drift allowance.
const MinTTL = 100 * time.Millisecond

// Drift is the clock-drift allowance subtracted from a grant's validity:
// 1% of the TTL plus 2ms, as in the Redlock description.
func Drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

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
	closeRDB bool
	err      error
	// evictionAllowed: Open accepts nodes whose maxmemory-policy may
	// evict keys.
	evictionAllowed bool
}

type node struct {
	rdb   redis.UniversalClient
	where string
	hub   *redisscript.Hub
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

// New returns a driver over independent Redis nodes (not replicas of each
// other). A lock is held when a majority of them hold it; use an odd
// number, at least 3. Close does not close the clients. Its errors wrap
// dlock.ErrInvalidOption.
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
	d.keyCache = redisscript.NewKeyCache(d.prefix)
	for i, rdb := range nodes {
		where := fmt.Sprintf("node %d", i)
		if c, ok := rdb.(*redis.Client); ok {
			where = c.Options().Addr
		}
		d.nodes = append(d.nodes, &node{rdb: rdb, where: where, hub: redisscript.NewHub(rdb, "")})
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

// Capabilities: no fair queue, no sessions, no durable fencing (see the
// package documentation).
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{MinTTL: MinTTL}
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

// unreachable is the error when too few nodes answered to decide.
func (d *Driver) unreachable(ctx context.Context, what string, t tally) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w: redlock: %s: %d of %d nodes answered, a majority (%d) is needed: %w",
		driver.ErrUnavailable, what, len(d.nodes)-len(t.errs), len(d.nodes), d.quorum, errors.Join(t.errs...))
}

// Acquire takes the lock on a majority, waiting if req.Wait.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if d.err != nil {
		return driver.Grant{}, d.err
	}
	if req.Fair {
		return driver.Grant{}, fmt.Errorf("%w: redlock has no fair queue", driver.ErrUnsupported)
	}
	return driver.AcquireByRetry(ctx, req, d)
}

// TryAcquire makes one two-round attempt (driver.Retrier); see the package
// documentation.
func (d *Driver) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, time.Duration, error) {
	k := d.keys(req.Name)
	timeout := nodeTimeout(req.TTL)
	start := clock.Now()

	r1 := d.each(ctx, nil, timeout, func(ctx context.Context, n *node) reply {
		ok, c, err := k.Acquire(ctx, n.rdb, req.Owner, req.TTL, req.Holder, redisscript.Read, redisscript.WakeAny)
		return reply{ok: ok, n: c, err: err}
	})
	t1 := count(r1)
	if t1.ok < d.quorum {
		d.abandon(ctx, k, req)
		if len(t1.errs) > len(d.nodes)-d.quorum {
			return driver.Grant{}, 0, d.unreachable(ctx, "acquire "+req.Name, t1)
		}
		return driver.Grant{}, retryAfter(r1, t1, d.quorum), driver.ErrNotAcquired
	}
	var token uint64
	for _, i := range t1.okIdx {
		token = max(token, uint64(r1[i].n))
	}
	token++

	// Round 2 goes to every node that answered round 1, those that refused
	// too (the lock there is another's): their counters are raised as well,
	// so that the latest counter is on as many nodes as can be reached.
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
	validity := req.TTL - clock.Since(start) - Drift(req.TTL)
	if t2.ok < d.quorum || validity <= 0 {
		d.abandon(ctx, k, req)
		if t2.ok < d.quorum && len(t2.errs) > 0 {
			return driver.Grant{}, 0, d.unreachable(ctx, "acquire "+req.Name, t2)
		}
		// The lock expired on nodes before the rounds were done: the TTL is
		// too short for these nodes' latency. Try again.
		return driver.Grant{}, driver.Jitter(5 * time.Millisecond), driver.ErrNotAcquired
	}
	return driver.Grant{Token: token, Since: start, TTL: req.TTL - Drift(req.TTL)}, 0, nil
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
	return driver.Jitter(10 * time.Millisecond)
}

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
		ok, err := k.Extend(ctx, n.rdb, h.Owner, ttl+Drift(ttl))
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
	rs := d.each(ctx, nil, 5*time.Second, func(ctx context.Context, n *node) reply {
		ok, err := k.Release(ctx, n.rdb, h.Owner, redisscript.WakeAny)
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
	channel := d.keys(name).Channel
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
			ready, stop, err := n.hub.Subscribe(context.WithoutCancel(ctx), channel, "", wake)
			if err != nil {
				readyc <- redisscript.Unavailable(ctx, n.where, err)
				return
			}
			mu.Lock()
			if stopped {
				stop()
			} else {
				stops = append(stops, stop)
			}
			mu.Unlock()
			if err := redisscript.WaitReady(ctx, subscribeTimeout, ready); err != nil {
				readyc <- redisscript.Unavailable(ctx, n.where, err)
				return
			}
			readyc <- nil
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
	return wake, stopAll, nil
}

// Inspect reports the holder that a majority of nodes agree on.
func (d *Driver) Inspect(ctx context.Context, name string) (driver.Info, error) {
	if d.err != nil {
		return driver.Info{}, d.err
	}
	k := d.keys(name)
	states := make([]redisscript.State, len(d.nodes))
	rs := d.each(ctx, nil, 5*time.Second, func(ctx context.Context, n *node) reply {
		st, err := k.Read(ctx, n.rdb)
		if err == nil {
			states[slices.Index(d.nodes, n)] = st
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
			pttls = append(pttls, st.PTTL)
		}
		// The lock is held until all but quorum-1 of these have expired.
		slices.Sort(pttls)
		in.ExpiresIn = pttls[len(pttls)-d.quorum]
		return in, nil
	}
	return driver.Info{Name: name}, nil
}

// List reports the locks held on a majority whose names start with prefix,
// by a SCAN of every node.
func (d *Driver) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	if d.err != nil {
		return nil, d.err
	}
	seen := map[string]bool{}
	var names []string
	var errs []error
	for _, n := range d.nodes {
		ns, err := redisscript.ScanNames(ctx, n.rdb, d.prefix)
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
	var out []driver.Info
	for _, name := range names {
		in, err := d.Inspect(ctx, name)
		if err != nil {
			return nil, err
		}
		if in.Held {
			out = append(out, in)
		}
	}
	return out, nil
}

// Break deletes the lock on every node, whoever holds it, and wakes the
// waiters; the counters are kept, so the next grant's token is higher. It
// succeeds only when a majority of nodes answered (each either deleted
// the lock or did not have it): then no majority holds it any more, and
// the holder's next renewal fails. Otherwise it returns ErrUnavailable
// naming the nodes that did not answer, since the lock may still be held
// on a majority.
func (d *Driver) Break(ctx context.Context, name string) error {
	if d.err != nil {
		return d.err
	}
	k := d.keys(name)
	rs := d.each(ctx, nil, 5*time.Second, func(ctx context.Context, n *node) reply {
		ok, err := k.Break(ctx, n.rdb, redisscript.WakeAny)
		return reply{ok: ok, err: err}
	})
	t := count(rs)
	switch {
	case t.ok+t.refused < d.quorum:
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: redlock: break %s: deleted on %d of %d nodes, free on %d, and %d did not answer: a majority (%d) must answer, so the lock may still be held: %w",
			driver.ErrUnavailable, name, t.ok, len(d.nodes), t.refused, len(t.errs), d.quorum, errors.Join(t.errs...))
	case t.ok > 0:
		return nil
	}
	return fmt.Errorf("%w: redlock: %q is free", driver.ErrNotHeld, name)
}

// Close closes the pub/sub connections, and the clients if the driver was
// opened from a URL.
func (d *Driver) Close() error {
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
