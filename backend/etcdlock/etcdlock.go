package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock/dlock/driver"
)

// DefaultPrefix is the key prefix under which locks live unless WithPrefix
// (or the URL's prefix parameter) says otherwise.
const DefaultPrefix = "dlock/"

// Driver is the etcd backend of dlock. Create it with New over your own
// client, or with dlock.Open("etcd://…") after importing this package.
type Driver struct {
	cli    *clientv3.Client
	owned  bool // Close closes cli
	prefix string
	compat string // "" (dlock's layout) or CompatEtcdctl
	pool   leasePool
	loss   lossWatch

	streamOnce sync.Once
	streamStop context.CancelFunc
}

var _ driver.Driver = (*Driver)(nil)

// Option configures a Driver made by New.
type Option func(*Driver) error

// WithPrefix puts every key of this driver under prefix (default
// DefaultPrefix). Drivers with different prefixes do not see each other's
// locks.
func WithPrefix(prefix string) Option {
	return func(d *Driver) error {
		d.prefix = prefix
		return nil
	}
}

// New returns a driver over an etcd client the caller owns: Close does not
// close cli. Its errors wrap dlock.ErrInvalidOption.
func New(cli *clientv3.Client, opts ...Option) (*Driver, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: etcdlock.New: cli is nil", driver.ErrInvalidOption)
	}
	d := newDriver(cli)
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(d); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func newDriver(cli *clientv3.Client) *Driver {
	d := &Driver{cli: cli, prefix: DefaultPrefix}
	d.loss.d = d
	return d
}

// Client returns the etcd client the driver uses.
func (d *Driver) Client() *clientv3.Client { return d.cli }

// Capabilities: FIFO by create revision, durable revision tokens, leases
// of whole seconds, semaphores and read-write locks in dlock's own layout.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Fair:           true,
		DurableFencing: true,
		Semaphore:      d.compat == "",
		RWMutex:        d.compat == "",
		MinTTL:         time.Second,
	}
}

// Close closes the client if the driver opened it (dlock.Open). Held locks
// are not released: their leases expire after their TTL.
func (d *Driver) Close() error {
	d.streamOnce.Do(func() {}) // no stream kept after Close
	if d.streamStop != nil {
		d.streamStop()
	}
	d.loss.close()
	if !d.owned {
		return nil
	}
	return d.cli.Close()
}

// watchCtx returns ctx marked as every watch of this driver is, so that
// they all share one gRPC watch stream, which keepWatchStream holds open:
// etcd's client closes a stream when its last watch ends and opens a new
// one for the next, which would cost a stream set-up on both sides per wait.
// The watches require a leader, so that a member cut off from its quorum
// ends them instead of leaving them silent.
func (d *Driver) watchCtx(ctx context.Context) context.Context {
	d.streamOnce.Do(func() {
		ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(d.cli.Ctx()))
		d.streamStop = cancel
		go d.keepWatchStream(ctx)
	})
	return clientv3.WithRequireLeader(ctx)
}

// keepWatchStream keeps one watch open, on a key no lock uses (escaped
// names never hold a NUL byte), until ctx ends.
func (d *Driver) keepWatchStream(ctx context.Context) {
	for failures := 1; ctx.Err() == nil; failures++ {
		for range d.cli.Watch(ctx, d.prefix+"\x00") {
		}
		select {
		case <-ctx.Done():
		case <-time.After(retryBackoff.Delay(failures - 1)):
		}
	}
}

// ttlSeconds rounds a TTL up to whole seconds, etcd's lease granularity.
func ttlSeconds(ttl time.Duration) int64 {
	s := int64(math.Ceil(ttl.Seconds()))
	return max(s, 1)
}

// unavailable classifies an error from the etcd client: a lease etcd no
// longer knows is ErrLeaseLost; the rest is driver.Classify's.
func unavailable(ctx context.Context, op string, err error) error {
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("%w: etcd %s: %w", driver.ErrLeaseLost, op, err)
	}
	return driver.Classify(ctx, "etcd "+op, err)
}

// cleanupTimeout bounds the work done, detached from the caller's context,
// to take back a queue entry whose caller gave up.
const cleanupTimeout = 5 * time.Second

// lease is an etcd lease and what this client can prove about it: it was
// alive, on the server, at least until since+ttl.
type lease struct {
	id  clientv3.LeaseID
	ttl time.Duration // as granted by the server

	mu    sync.Mutex
	since time.Time // send time of the last confirmed grant or keepalive
}

func (l *lease) confirmed(sent time.Time) {
	l.mu.Lock()
	if sent.After(l.since) {
		l.since = sent
	}
	l.mu.Unlock()
}

func (l *lease) lastConfirmed() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.since
}

// keepAlive renews the lease once and records the confirmation.
func (d *Driver) keepAlive(ctx context.Context, l *lease) error {
	sent := driver.Now()
	if _, err := d.cli.KeepAliveOnce(ctx, l.id); err != nil {
		return unavailable(ctx, "keepalive", err)
	}
	l.confirmed(sent)
	return nil
}

// leasePool keeps the leases of released locks for reuse, so that an
// acquire costs one transaction rather than a lease grant plus a
// transaction, and a release one transaction rather than a delete plus a
// revoke. A pooled lease has no keys attached; one that is not reused
// simply expires on the server.
type leasePool struct {
	mu   sync.Mutex
	free map[int64][]*lease // by requested TTL in seconds
}

// maxPooled bounds the idle leases kept per TTL.
const maxPooled = 16

// get returns a lease of ttl seconds with at least two thirds of its TTL
// left, reusing an idle one where it can.
func (d *Driver) getLease(ctx context.Context, sec int64) (*lease, error) {
	for {
		l := d.pool.take(sec)
		if l == nil {
			break
		}
		age := driver.Since(l.lastConfirmed())
		if age <= l.ttl/3 {
			return l, nil
		}
		if age < l.ttl/2 && d.keepAlive(ctx, l) == nil {
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// Too old to trust, or gone: forget it; it expires by itself.
	}
	sent := driver.Now()
	resp, err := d.cli.Grant(ctx, sec)
	if err != nil {
		return nil, unavailable(ctx, "lease grant", err)
	}
	return &lease{id: resp.ID, ttl: time.Duration(resp.TTL) * time.Second, since: sent}, nil
}

func (p *leasePool) take(sec int64) *lease {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.free[sec]
	if len(s) == 0 {
		return nil
	}
	l := s[len(s)-1]
	p.free[sec] = s[:len(s)-1]
	return l
}

func (p *leasePool) put(sec int64, l *lease) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.free == nil {
		p.free = map[int64][]*lease{}
	}
	if len(p.free[sec]) < maxPooled {
		p.free[sec] = append(p.free[sec], l)
	}
}

// holding is the Handle of a grant: the queue key, its create revision
// (the token), its lease, and the state of the watch that reports the
// key's deletion (losswatch.go).
type holding struct {
	key   string
	rev   int64
	sec   int64 // requested TTL in seconds: the lease's pool
	lease *lease
	gone  *driver.Signal // Grant.Lost: the key was deleted

	// Guarded by the driver's lossWatch.mu:
	from int64 // the revision its watch starts at
	wid  int64 // its watch ID: 0 while it has none, ended once released or lost
}

// Extend renews the lease and checks that the lock's key is still ours: a
// Break deletes the key but leaves the lease alive.
func (d *Driver) Extend(ctx context.Context, h driver.Held, _ time.Duration) error {
	hd, ok := h.Handle.(*holding)
	if !ok {
		return fmt.Errorf("%w: not a grant of this driver", driver.ErrNotHeld)
	}
	kaErr := make(chan error, 1)
	go func() { kaErr <- d.keepAlive(ctx, hd.lease) }()
	resp, err := d.cli.Get(ctx, hd.key)
	if kerr := <-kaErr; kerr != nil {
		return kerr
	}
	if err != nil {
		return unavailable(ctx, "get", err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != hd.rev {
		return fmt.Errorf("%w: the key %q was deleted (broken)", driver.ErrLeaseLost, hd.key)
	}
	return nil
}

// Release deletes the lock's key if it is still there; the deletion is
// what wakes the next waiter. The lease goes back to the pool.
//
// A plain delete is enough, with no compare of the create revision: the
// key is named by our lease, which carries no other acquire while we hold
// it, and the acquire put the key only where it did not exist, so the key
// is ours or gone (broken, or expired with the lease). A transaction with
// the compare costs etcd measurably more to apply than a delete, on every
// release.
func (d *Driver) Release(ctx context.Context, h driver.Held) error {
	hd, ok := h.Handle.(*holding)
	if !ok {
		return fmt.Errorf("%w: not a grant of this driver", driver.ErrNotHeld)
	}
	// Stop watching first: our own delete is not a loss.
	d.loss.remove(hd)
	resp, err := d.cli.Delete(ctx, hd.key)
	if err != nil {
		return unavailable(ctx, "release", err)
	}
	if resp.Deleted == 0 {
		return fmt.Errorf("%w: the key %q was already deleted (broken or expired)", driver.ErrLeaseLost, hd.key)
	}
	d.pool.put(hd.sec, hd.lease)
	return nil
}
