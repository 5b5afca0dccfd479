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
//  1. On every node: if the lock key is absent, set it with PX = TTL (and
//     token 0); report the node's fence counter and its fence state (below),
//     read in the same step. The lock is won if a majority granted it.
//  2. The token is one more than the largest counter reported, which must
//     include a majority of nodes whose fence state is complete; on every
//     node that answered round 1, raise the fence counter to it (never
//     lowering it), and where the lock is the owner's, store the token in
//     it. A majority must confirm the lock. The counter is raised on the
//     nodes that refused too (the lock there is another's, e.g. a stale
//     one a release did not reach), so that the latest counter is on as
//     many nodes as can be reached.
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
// # Fence states: a node that lost its counters does not count
//
// Every node has a key <prefix>:fence-state (no TTL) that says whether its
// fence counters are complete. A node that restarts without persistence
// comes back without it. Such a node takes part in round 1 (its lock
// counts toward the lock's majority) and round 2 (its counter is raised),
// but a token is issued only if a majority of all N nodes answered round 1
// with a complete state; otherwise the attempt fails with ErrUnavailable
// saying so, e.g. "2 of 3 nodes reachable but only 1 holds its fence
// counters (h3:6379 has no fence state: restarted empty, or never
// seeded)". Round 1 reads this key in the same script as a lock's keys,
// which are in another hash slot: each node must be a standalone server,
// not a Redis Cluster.
//
// A grant that sees a complete majority and a node without complete
// counters re-seeds that node in the background: it marks the node as being
// seeded (with an id of its own, and a claim of two minutes on the node's
// clock, during which other clients leave the node to it), finds every
// lock's keys on the other nodes by SCAN, reads each counter on a majority
// of complete nodes (in the same step as their fence state), raises the
// node's counters to the largest values read (a Lua script that only ever
// raises a counter, so that a copy of an older value cannot undo a grant's
// round 2 made meanwhile), and marks it complete only if its state is still
// the one the copy began with: a restart during the copy (which drops the
// state) or another client's re-seed (which replaces the claim once it ran
// out) leaves it incomplete, to be re-seeded again. A grant between its two
// rounds has its lock, with token 0, on every node whose counter its round
// 2 will raise; the re-seed finds that lock and reads that counter again
// until the round is done, so the copy includes the grant's token even when
// a node that confirmed it loses it. Until the copy is complete, grants go
// on with the complete majority. A re-seed takes one SCAN of each node and
// a few round trips per 200 locks.
//
// A deployment where no node has a fence state (a new one, or counters
// left by an earlier version of dlock) is seeded at its first acquire,
// which needs every node to answer: each node gets the largest of every
// counter found on all of them and is marked complete (a seeding that
// outlasts the acquire goes on in the background, and acquires fail with
// ErrUnavailable until it is done). A first seeding that stopped half-way,
// with some nodes complete and the others still new, is finished by the
// next acquire.
//
// # What the fencing token guarantees
//
// The token is strictly greater than that of every earlier grant whose
// round 2 completed, provided that each node either keeps every write it
// acknowledged or comes back without its fence state (see Persistence),
// and that no majority of the nodes loses its counters. A grant's round 2
// wrote its token into the counters of a majority W; the next grant reads
// the counters of a majority R of complete nodes; W and R share a node.
// That node either kept the token, or lost it and has been re-seeded
// since, from a majority that shares a node with W (which had the token,
// or was re-seeded in turn), reading it after the grant's round 2 there.
// On each node the order is fixed by the lock itself: round 2 of the
// earlier grant ran while its lock was there (it is owner-checked), and
// the later grant could only set its lock after that lock was gone. So
// the token order does not depend on any clock: a node whose clock jumps,
// or a holder paused by GC past its TTL, can break mutual exclusion but
// not the order of tokens.
//
// So a node that restarts empty costs nothing but its vote on the token
// until it is re-seeded (TestTokensIncreaseAcrossOneNodeRestartedEmpty
// restarts each node of three in turn), even combined with a partition:
// with n1 cut off, a grant on {n2, n3} gets token 11 (n1 has 10); n3
// restarts empty; a grant that reaches only {n1, n3} is refused rather
// than issue 11 again (TestNoTokenRepeatAfterPartitionThenEmptyRestart,
// TestDoubleFaultRefusesThenRecoversHigher), and once a complete
// majority answers, n3 is re-seeded and tokens go on increasing. A
// re-seed running during grants never lowers a counter
// (TestReseedConcurrentWithGrantsNeverLowersCounter), and waits for a
// grant between its rounds (TestReseedWaitsForGrantBetweenRounds).
//
// The price is availability: a second node that loses its counters
// before the first is re-seeded leaves fewer than a majority complete
// (with three nodes), and acquiring is refused from then on
// (TestMajorityLosingCountersRefuses), where tokens would otherwise
// restart at 1. Restart nodes one at a time, each after the previous one
// is complete again (GET <prefix>:fence-state; its re-seed starts at the
// first acquire that reaches it). To accept that tokens
// issued only on the lost nodes may repeat, DEL <prefix>:fence-state on
// every node: the next acquire that reaches every node then seeds them
// all from the largest counters left (TestFirstUseSeedsEveryNode).
//
// A node restarted empty can still break mutual exclusion: its locks are
// gone, so another client can win a lock it held plus one more node whose
// copy expired or was lost. Restarting an empty node only after the
// longest TTL in use has passed (antirez's "delayed restart") protects the
// locks; fence states protect the tokens.
//
// # Persistence and eviction
//
// Fence states detect a node that lost everything, not one that lost only
// its last writes. Run every node either without persistence (it restarts
// empty, which is detected) or with appendonly yes and appendfsync
// always (it restarts with every write it acknowledged). With appendfsync
// everysec (Redis's default for AOF), a node that crashes comes back with
// its fence state, written long before, but without up to the last second
// of writes: counters raised in that second by grants are lower again,
// while the node counts as complete; if a grant's majority W was that
// node and one other, and the next grant reads that node and a node that
// missed the grant (cut off), the token repeats. RDB snapshots lose
// everything since the last snapshot, in the same way, and so does a
// failover to a replica that had not received the last writes. With such
// persistence, DEL the node's <prefix>:fence-state before clients reach
// it after a crash, so that it is re-seeded.
//
// A node that evicts keys is a node that loses data: under volatile-*
// policies it may evict held locks (two holders; counters and the fence
// state have no TTL and stay), and under allkeys-* also counters, while
// keeping its fence state, so tokens can repeat (evicting the fence state
// itself is harmless: the node is re-seeded). Open therefore refuses nodes
// with an evicting maxmemory-policy unless allow_eviction=true (as the
// Redis backend does; where CONFIG is disabled it logs a warning): with
// allow_eviction=true and an allkeys-* policy, the token guarantee above
// does not hold. Capabilities().DurableFencing is false, since dlock
// cannot see how the nodes persist.
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
	d.keyCache = redisscript.NewKeyCache(d.prefix)
	for i, rdb := range nodes {
		where := fmt.Sprintf("node %d", i)
		if c, ok := rdb.(*redis.Client); ok {
			where = c.Options().Addr
		}
		d.nodes = append(d.nodes, &node{idx: i, rdb: rdb, where: where, hub: redisscript.NewHub(rdb, "")})
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
	return driver.AcquireByRetry(ctx, req, d)
}

// TryAcquire makes one two-round attempt (driver.Retrier); see the package
// documentation.
func (d *Driver) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, time.Duration, error) {
	k := d.keys(req.Name)
	timeout := nodeTimeout(req.TTL)
	for seeded := false; ; seeded = true {
		start := driver.Now()
		round1 := make([]redisscript.RoundOne, len(d.nodes))
		r1 := d.each(ctx, nil, timeout, func(ctx context.Context, n *node) reply {
			r, err := k.AcquireRead(ctx, n.rdb, req.Owner, req.TTL, req.Holder, d.stateKey())
			round1[n.idx] = r
			return reply{ok: r.Granted, n: r.PTTL, err: err}
		})
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
			d.abandon(ctx, k, req)
			if len(t1.errs) > len(d.nodes)-d.quorum {
				return driver.Grant{}, 0, d.unreachable(ctx, "acquire "+req.Name, t1)
			}
			// A fresh deployment: seed every node, then try again. (A node
			// whose state another client changed meanwhile, e.g. by a
			// re-seed once the others were complete, is left to it: the
			// next round 1 reads the states as they are.)
			if !seeded && len(states) == len(d.nodes) && freshStates(states) {
				err := d.seedAllShared(ctx)
				if err == nil || errors.Is(err, errStateChanged) {
					continue
				}
				if !errors.Is(err, errNotFresh) {
					return driver.Grant{}, 0, err
				}
			}
			return driver.Grant{}, 0, d.unseeded(ctx, req.Name, r1, round1, complete)
		}
		for i, r := range r1 {
			if r.done && r.err == nil && round1[i].State != stateComplete {
				d.reseedLater(i)
			}
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
			return driver.Grant{}, driver.Jitter(5 * time.Millisecond), driver.ErrNotAcquired
		}
		return driver.Grant{Token: token, Since: start, TTL: req.TTL - Drift(req.TTL)}, 0, nil
	}
}

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
	return driver.ListByInspect(ctx, names, d.Inspect)
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
		return driver.Classify(ctx, "", fmt.Errorf("%w: redlock: break %s: deleted on %d of %d nodes, free on %d, and %d did not answer: a majority (%d) must answer, so the lock may still be held: %w",
			driver.ErrUnavailable, name, t.ok, len(d.nodes), t.refused, len(t.errs), d.quorum, errors.Join(t.errs...)))
	case t.ok > 0:
		return nil
	}
	return fmt.Errorf("%w: redlock: %q is free", driver.ErrNotHeld, name)
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
