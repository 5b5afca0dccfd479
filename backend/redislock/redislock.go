package redislock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/driver"
)

// MinTTL is the shortest lease granted: Redis counts in milliseconds, and
// a lease must outlast a few round trips to be renewable.
const MinTTL = 20 * time.Millisecond

// DefaultWaiterTTL is how long a fair waiter's place in the queue lives
// without a heartbeat.
const DefaultWaiterTTL = 2 * time.Second

// Driver is the Redis backend. It is safe for concurrent use.
type Driver struct {
	rdb       redis.UniversalClient
	where     string // the server, for errors
	closeRDB  bool   // the client was opened from a URL: Close closes it
	prefix    string
	keyCache  *redisscript.KeyCache
	waiterTTL time.Duration
	durable   bool
	// evictionAllowed: Open accepts a server whose maxmemory-policy may
	// evict keys.
	evictionAllowed bool
	proc            string // this driver's channel for fair hand-offs; "" on a cluster
	wake            redisscript.Wake
	noHandoff       bool // tests: behave as on a cluster
	hub             *redisscript.Hub
	boundedIO       bool // the client's reads and writes time out by themselves
	layout          redisscript.Layout
	// keyspace: the server announces deletions and expiries (compat=setnx
	// waiters listen for them rather than poll); db is the database they
	// are announced for.
	keyspace bool
	db       int
}

// Option configures a Driver made by New.
type Option func(*Driver) error

// WithPrefix sets the first part of every key (default "dlock"); it may
// not contain '{' or '}'.
func WithPrefix(p string) Option { return set(func(d *Driver) { d.prefix = p }) }

// set makes an Option of a setting that cannot fail (New checks the
// result).
func set(f func(*Driver)) Option {
	return func(d *Driver) error {
		f(d)
		return nil
	}
}

// WithWaiterTTL sets how long a fair waiter's place in the queue lives
// without a heartbeat (default 2s; the waiter renews it every third of
// that). A killed waiter delays the waiters behind it by at most this much.
func WithWaiterTTL(ttl time.Duration) Option { return set(func(d *Driver) { d.waiterTTL = ttl }) }

// WithDurableFencing declares that the server persists every write before
// acknowledging it (appendonly yes, appendfsync always) and does not fail
// over to a lagging replica, so that fencing tokens survive its restart.
// Capabilities then reports DurableFencing.
func WithDurableFencing() Option { return set(func(d *Driver) { d.durable = true }) }

// WithEvictionAllowed makes Open accept a server whose maxmemory-policy
// may evict keys (volatile-*, allkeys-*), which it refuses otherwise (URL:
// allow_eviction=true): such a server may delete a held lock under memory
// pressure and grant it to another client; the evicted holder learns it at
// its next renewal, within a third of its TTL. See the package
// documentation.
func WithEvictionAllowed() Option { return set(func(d *Driver) { d.evictionAllowed = true }) }

// WithCompat selects a compatible layout (URL: compat=setnx): "setnx"
// locks the key named by the lock name itself, with SET NX PX, as
// redis-py's Lock, redsync, bsm/redislock and redlock-py do, so that
// their locks and dlock's exclude each other. See the package
// documentation, "Compat mode".
func WithCompat(layout string) Option {
	return func(d *Driver) error {
		l, err := redisscript.ParseLayout("redislock", layout)
		d.layout = l
		return err
	}
}

// WithKeyspaceEvents declares that the server announces deletions and
// expiries (notify-keyspace-events with K, g and x, or K and A), so that
// compat=setnx waiters learn of a foreign holder's release without
// polling. Open reads the setting itself; New cannot.
func WithKeyspaceEvents() Option { return set(func(d *Driver) { d.keyspace = true }) }

// New returns a driver over rdb (a *redis.Client, a *redis.ClusterClient,
// a failover client). Close does not close rdb. Its errors wrap
// dlock.ErrInvalidOption. It does not check the server's eviction policy,
// as Open does: call CheckEviction.
func New(rdb redis.UniversalClient, opts ...Option) (*Driver, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: redislock.New: rdb is nil", dlock.ErrInvalidOption)
	}
	d := &Driver{rdb: rdb, prefix: redisscript.DefaultPrefix, waiterTTL: DefaultWaiterTTL}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(d); err != nil {
			return nil, err
		}
	}
	d.where = describe(rdb)
	d.keyCache = redisscript.NewKeyCache(d.prefix, d.layout)
	if _, cluster := rdb.(*redis.ClusterClient); cluster && d.layout == redisscript.SetNX {
		return nil, fmt.Errorf("%w: redislock: compat=setnx needs a single Redis server (or Redlock's nodes): on Redis Cluster a lock key and its fence counter may be on different nodes", dlock.ErrInvalidOption)
	}
	if err := redisscript.CheckPrefix(d.prefix); err != nil {
		return nil, fmt.Errorf("%w: redislock: %v", dlock.ErrInvalidOption, err)
	} else if d.waiterTTL < 3*MinTTL {
		return nil, fmt.Errorf("%w: redislock: WithWaiterTTL(%v): must be at least %v", dlock.ErrInvalidOption, d.waiterTTL, 3*MinTTL)
	}
	if c, single := rdb.(*redis.Client); single {
		// After go-redis normalised them, 0 and -1 both mean no timeout.
		o := c.Options()
		d.boundedIO = o.ReadTimeout > 0 && o.WriteTimeout > 0
		d.db = o.DB
	}
	if _, single := rdb.(*redis.Client); single && !d.noHandoff && d.layout != redisscript.SetNX {
		// Hand-offs need PUBLISH to count this process's subscription,
		// which a cluster node does only for its own clients.
		d.proc = d.prefix + ":proc:" + driver.NewNonce()
	}
	d.wake = redisscript.WakeFirst
	if d.proc != "" {
		d.wake = redisscript.HandOff
	}
	if d.layout == redisscript.SetNX {
		d.wake = redisscript.WakeAny // waiters retry (see setnx.go)
	}
	d.hub = redisscript.NewHub(rdb, d.proc)
	return d, nil
}

func describe(rdb redis.UniversalClient) string {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return "cluster " + strings.Join(c.Options().Addrs, ",")
	}
	return fmt.Sprintf("%T", rdb)
}

func (d *Driver) keys(name string) *redisscript.Keys { return d.keyCache.Get(name) }

// heldKeys returns the keys of a held lock, from the cache. A grant does
// not carry them as its handle: a program that holds many locks at once
// would keep some 500 bytes of keys per lock (SHA-256 of the name, seven
// key strings), whereas a renewal or release that misses the cache
// rebuilds them in well under a microsecond, beside its round trip.
func (d *Driver) heldKeys(h driver.Held) *redisscript.Keys { return d.keys(h.Name) }

func (d *Driver) unavailable(ctx context.Context, err error) error {
	return redisscript.Unavailable(ctx, d.where, err)
}

// Capabilities: fair waiting, semaphores and read-write locks (not in
// compat=setnx, whose foreign clients know none of them), no sessions,
// fencing durable only if declared.
func (d *Driver) Capabilities() driver.Capabilities {
	own := d.layout != redisscript.SetNX
	return driver.Capabilities{Fair: own, Semaphore: own, RWMutex: own, DurableFencing: d.durable, MinTTL: MinTTL}
}

// Acquire takes the lock; see the package documentation.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Limit > 1 || req.Shared {
		if d.layout == redisscript.SetNX {
			return driver.Grant{}, fmt.Errorf("%w: redis compat=setnx: semaphores and read-write locks (the other libraries lock a key with one holder)", driver.ErrUnsupported)
		}
		return d.acquirePermit(ctx, req)
	}
	if d.layout == redisscript.SetNX {
		return d.acquireSetNX(ctx, req)
	}
	return d.acquireQueued(ctx, req)
}

// subscribeTimeout bounds the wait for the server to confirm a SUBSCRIBE.
const subscribeTimeout = 5 * time.Second

// subscribe registers a queued waiter's wake-ups on the driver's shared
// pub/sub connection; it returns once the server confirmed the
// subscription.
func (d *Driver) subscribe(ctx context.Context, name, owner string, wake chan struct{}) (func(), error) {
	ready, stop, err := d.hub.Subscribe(ctx, d.keys(name).Channel, owner, wake)
	if err != nil {
		return nil, d.unavailable(ctx, err)
	}
	for _, r := range []<-chan struct{}{ready, d.hub.ProcReady()} {
		if err := redisscript.WaitReady(ctx, subscribeTimeout, r); err != nil {
			stop()
			return nil, d.unavailable(ctx, err)
		}
	}
	return stop, nil
}

// Extend renews the lease if it is still the owner's.
func (d *Driver) Extend(ctx context.Context, h driver.Held, ttl time.Duration) error {
	var ok bool
	var err error
	if p, isPermit := h.Handle.(permit); isPermit {
		ok, err = p.k.ExtendPermit(ctx, d.rdb, h.Owner, p.reader, ttl)
	} else {
		ok, err = d.heldKeys(h).Extend(ctx, d.rdb, h.Owner, ttl)
	}
	if err != nil {
		return d.unavailable(ctx, err)
	}
	if !ok {
		return fmt.Errorf("%w: redis: %q is no longer held by this owner", driver.ErrLeaseLost, h.Name)
	}
	return nil
}

// Release frees the lock if it is still the owner's, and wakes the next
// waiter.
func (d *Driver) Release(ctx context.Context, h driver.Held) error {
	var ok bool
	var err error
	if p, isPermit := h.Handle.(permit); isPermit {
		ok, err = p.k.ReleasePermit(ctx, d.rdb, h.Owner, p.reader)
	} else {
		ok, err = d.heldKeys(h).Release(ctx, d.rdb, h.Owner, d.wake)
	}
	if err != nil {
		return d.unavailable(ctx, err)
	}
	if !ok {
		return fmt.Errorf("%w: redis: %q is no longer held by this owner", driver.ErrLeaseLost, h.Name)
	}
	return nil
}

// Inspect reports the holder, its token and remaining TTL, and the live
// fair waiters in order; for a semaphore, every permit's holder, and for
// a read-write lock held by readers, every reader.
func (d *Driver) Inspect(ctx context.Context, name string) (driver.Info, error) {
	if d.layout == redisscript.SetNX {
		return d.inspectSetNX(ctx, name)
	}
	st, err := d.keys(name).Read(ctx, d.rdb)
	if err != nil {
		return driver.Info{}, d.unavailable(ctx, err)
	}
	return infoFrom(name, st), nil
}

func infoFrom(name string, st redisscript.State) driver.Info {
	in := driver.Info{Name: name, Waiters: st.Waiters}
	if st.Foreign {
		in.Held, in.Holder, in.ExpiresIn = true, redisscript.ForeignHolder, st.PTTL
	} else if st.Held {
		in.Held, in.Token, in.Holder, in.ExpiresIn = true, st.Value.Token, st.Value.Holder, st.PTTL
	} else if len(st.Permits) > 0 {
		p := st.Permits[0]
		in.Held, in.Token, in.Holder, in.ExpiresIn = true, p.Token, p.Holder, p.PTTL
		for _, p := range st.Permits {
			in.Permits = append(in.Permits, driver.Permit{Token: p.Token, Holder: p.Holder, ExpiresIn: p.PTTL})
		}
	}
	return in
}

// List reports the held or waited-on locks whose names start with prefix.
// It SCANs every key of the driver's prefix (names are hashed into keys),
// so it costs time in proportion to the number of locks.
func (d *Driver) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	if d.layout == redisscript.SetNX {
		return d.listSetNX(ctx, prefix)
	}
	names, err := redisscript.ScanNamesAndSemaphores(ctx, d.rdb, d.prefix)
	if err != nil {
		return nil, d.unavailable(ctx, err)
	}
	var out []driver.Info
	for _, name := range names {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		in, err := d.Inspect(ctx, name)
		if err != nil {
			return nil, err
		}
		if in.Held || len(in.Waiters) > 0 {
			out = append(out, in)
		}
	}
	return out, nil
}

// Break frees the lock whoever holds it (its writer, or every reader of a
// read-write lock), or every permit of a semaphore, and wakes the next
// waiter; the fence counter is kept, so the next grant gets a higher
// token. A name whose lock key is free costs a second round trip, for a
// semaphore's permits.
func (d *Driver) Break(ctx context.Context, name string) error {
	if err := d.layout.CheckName(d.prefix, name); err != nil {
		return err
	}
	k := d.keys(name)
	ok, err := k.Break(ctx, d.rdb, d.wake)
	if err == nil && !ok && d.layout != redisscript.SetNX {
		ok, err = k.BreakPermits(ctx, d.rdb)
	}
	if err != nil {
		return d.unavailable(ctx, err)
	}
	if !ok {
		return fmt.Errorf("%w: redis: %q is free", driver.ErrNotHeld, name)
	}
	return nil
}

// Close closes the pub/sub connection, and the Redis client if the driver
// was opened from a URL. Held leases are not released.
func (d *Driver) Close() error {
	err := d.hub.Close()
	if d.closeRDB {
		if cerr := d.rdb.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

var (
	_ driver.Driver = (*Driver)(nil)
)
