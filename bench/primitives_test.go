package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"
	"go.uber.org/zap"

	"github.com/dlock/dlock"
)

// Scenario P: the semaphore, the read-write lock and the election, on each
// backend that has them, beside the Go incumbents where there are some.
const (
	limitP    = 3 // permits of the semaphore
	workersP  = 8
	readersP  = 6 // of the rwmutex's workers; the others write
	eachPA    = time.Second
	roundsP   = 2
	eachP     = 1500 * time.Millisecond
	warmUpP   = 250 * time.Millisecond
	semaphore = "semaphore"
	rwmutex   = "rwmutex"
	election  = "election"
)

var primitiveNames = []string{semaphore, rwmutex, election}

// primLib is one implementation of a primitive on one backend.
type primLib struct {
	backend, primitive, name string
	role                     role
	how                      string
	version                  string
	open                     func(t testing.TB) primWorker
}

// primWorker is one client of a primitive, with its own connection(s):
// take is a permit, the writer's lock or a campaign, and returns what
// releases it (Unlock, Resign); read is the rwmutex's reader lock.
type primWorker struct {
	take, read locker
	close      func()
}

// dlockOpener opens a dlock client of a backend with its own connection.
type dlockOpener func(t testing.TB) *dlock.Client

// dlockPrims are dlock's primitives on a backend that open opens; the
// capabilities of its first client say which it has: the others are
// named in unsupported.
func dlockPrims(t testing.TB, backend string, open dlockOpener) (libs []*primLib, unsupported []string) {
	c := open(t)
	caps := c.Capabilities()
	_ = c.Close()
	opts := []dlock.Option{dlock.WithTTL(max(ttl, caps.MinTTL))}
	fair := ""
	if caps.Fair {
		opts = append(opts, dlock.WithFair())
		fair = ", WithFair"
	}
	for _, p := range primitiveNames {
		l := &primLib{backend: backend, primitive: p, name: "dlock", role: ours}
		switch {
		case p == semaphore && !caps.Semaphore, p == rwmutex && !caps.RWMutex:
			unsupported = append(unsupported, p)
			continue
		case p == semaphore:
			l.how = fmt.Sprintf("Semaphore(name, %d).Acquire, Lease.Unlock%s", limitP, fair)
		case p == rwmutex:
			l.how = "RWMutex.RLock / Lock, Lease.Unlock (FIFO, writer preference)"
		case p == election:
			l.how = "Election.Campaign, Resign" + strings.ReplaceAll(fair, "WithFair", "FIFO")
		}
		l.open = func(t testing.TB) primWorker {
			c := open(t)
			lease := func(l *dlock.Lease, err error) (func() error, error) {
				if err != nil {
					return nil, err
				}
				return func() error { return l.Unlock(context.Background()) }, nil
			}
			w := primWorker{close: func() { _ = c.Close() }}
			switch p {
			case semaphore:
				w.take = cached(func(key string) *dlock.Semaphore { return c.Semaphore(key, limitP, opts...) },
					func(ctx context.Context, s *dlock.Semaphore) (func() error, error) { return lease(s.Acquire(ctx)) })
			case rwmutex:
				mk := func(key string) *dlock.RWMutex { return c.RWMutex(key, opts...) }
				w.take = cached(mk, func(ctx context.Context, rw *dlock.RWMutex) (func() error, error) { return lease(rw.Lock(ctx)) })
				w.read = cached(mk, func(ctx context.Context, rw *dlock.RWMutex) (func() error, error) { return lease(rw.RLock(ctx)) })
			case election:
				w.take = cached(func(key string) *dlock.Election { return c.Election(key, opts...) },
					func(ctx context.Context, e *dlock.Election) (func() error, error) {
						return lease(e.Campaign(ctx, "bench"))
					})
			}
			return w
		}
		libs = append(libs, l)
	}
	return libs, unsupported
}

// etcdPrimIncumbents are etcd's own election and its recipe's read-write
// lock, each worker with its own client and Session.
func etcdPrimIncumbents(endpoint string) []*primLib {
	session := func(t testing.TB) (*concurrency.Session, func()) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatalf("etcd client: %v", err)
		}
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(max(int(ttl/time.Second), 1)))
		if err != nil {
			t.Fatalf("etcd session: %v", err)
		}
		return s, func() { _ = s.Close(); _ = cli.Close() }
	}
	version := "etcd client " + modVersion("go.etcd.io/etcd/client/v3")
	el := &primLib{backend: "etcd", primitive: election, name: "concurrency.Election", role: incumbent, version: version,
		how: "etcd client/v3/concurrency: Campaign, Resign; one Session (lease TTL = the TTL) per worker"}
	el.open = func(t testing.TB) primWorker {
		s, closeAll := session(t)
		return primWorker{
			take: cached(func(key string) *concurrency.Election { return concurrency.NewElection(s, "/election/"+key) },
				func(ctx context.Context, e *concurrency.Election) (func() error, error) {
					if err := e.Campaign(ctx, "bench"); err != nil {
						return nil, err
					}
					return func() error { return e.Resign(context.Background()) }, nil
				}),
			close: closeAll,
		}
	}
	rw := &primLib{backend: "etcd", primitive: rwmutex, name: "recipe.RWMutex", role: incumbent, version: version,
		how: "etcd client/v3/experimental/recipes NewRWMutex: RLock / Lock (no context: a call cannot be cancelled); one Session per worker"}
	rw.open = func(t testing.TB) primWorker {
		s, closeAll := session(t)
		mk := func(key string) *recipe.RWMutex { return recipe.NewRWMutex(s, "/rwmutex/"+key) }
		return primWorker{
			take: cached(mk, func(ctx context.Context, m *recipe.RWMutex) (func() error, error) {
				if err := m.Lock(); err != nil {
					return nil, err
				}
				return func() error { return m.Unlock() }, nil
			}),
			read: cached(mk, func(ctx context.Context, m *recipe.RWMutex) (func() error, error) {
				if err := m.RLock(); err != nil {
					return nil, err
				}
				return func() error { return m.RUnlock() }, nil
			}),
			close: closeAll,
		}
	}
	return []*primLib{rw, el}
}

// primRun is the outcome of a primitive's runs: uncontended, one worker
// taking and releasing a name of its own; contended, workersP workers on
// one name, each grant held for hold.
type primRun struct {
	serial serial

	grants, reads int // all grants, and the rwmutex's readers' among them
	waits         []time.Duration
	writerWaits   []time.Duration // the rwmutex's writers'
	perWorker     []int
	errors        int
	violations    int     // more holders than the primitive allows: must be 0
	heldArea      float64 // holders integrated over time, in holder-seconds
	maxHeld       int
	elapsed       time.Duration
}

func (p *primRun) grantsPerSec() float64 { return float64(p.grants) / p.elapsed.Seconds() }
func (p *primRun) readsPerSec() float64  { return float64(p.reads) / p.elapsed.Seconds() }
func (p *primRun) writesPerSec() float64 { return float64(p.grants-p.reads) / p.elapsed.Seconds() }
func (p *primRun) meanHeld() float64     { return p.heldArea / p.elapsed.Seconds() }

// run has the workers take key in a loop, hold each grant for hold and
// release it, for d; the first readers of them read (the rwmutex), and at
// most limit hold at once (1: a writer or a leader alone). Grants after d
// are not counted (a recipe.RWMutex call cannot be cancelled).
func (p *primRun) run(ws []primWorker, readers, limit int, key string, hold, d time.Duration) {
	if p.perWorker == nil {
		p.perWorker = make([]int, len(ws))
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	holders, writers := 0, 0
	start := time.Now()
	end := start.Add(d)
	changed := start
	// account adds the holders since the last change, within the round.
	account := func(now time.Time) {
		if now.After(end) {
			now = end
		}
		if now.After(changed) {
			p.heldArea += float64(holders) * now.Sub(changed).Seconds()
			changed = now
		}
	}
	var wg sync.WaitGroup
	for i, w := range ws {
		reader := i < readers
		exclusive := !reader && (readers > 0 || limit == 1) // a writer, or a leader
		take := w.take
		if reader {
			take = w.read
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				release, err := take(ctx, key)
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						p.errors++
						mu.Unlock()
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				now := time.Now()
				mu.Lock()
				account(now)
				if writers > 0 || exclusive && holders > 0 || holders >= limit {
					p.violations++
				}
				holders++
				if exclusive {
					writers++
				}
				p.maxHeld = max(p.maxHeld, holders)
				if now.Before(end) {
					p.grants++
					p.perWorker[i]++
					p.waits = append(p.waits, now.Sub(t0))
					if reader {
						p.reads++
					} else if readers > 0 {
						p.writerWaits = append(p.writerWaits, now.Sub(t0))
					}
				}
				mu.Unlock()
				if hold > 0 {
					time.Sleep(hold)
				}
				mu.Lock()
				account(time.Now())
				holders--
				if exclusive {
					writers--
				}
				mu.Unlock()
				release()
			}
		})
	}
	wg.Wait()
	p.elapsed += d
}

// scenarioP runs P: each primitive of each backend, uncontended (the
// libraries of a backend and primitive interleaved call by call, as in A)
// and contended (round by round, as in B).
func (r *report) scenarioP(t *testing.T) {
	for _, b := range r.prims {
		for _, p := range primitiveNames {
			var ls []*primLib
			for _, l := range b.libs {
				if l.primitive == p {
					ls = append(ls, l)
				}
			}
			if len(ls) == 0 {
				continue
			}
			r.primitive(t, b.name, p, ls)
		}
	}
}

func (r *report) primitive(t *testing.T, backend, p string, ls []*primLib) {
	limit, readers := 1, 0
	switch p {
	case semaphore:
		limit = limitP
	case rwmutex:
		limit, readers = math.MaxInt, readersP
	}
	r.progress("P %s %s: uncontended %v, the libraries interleaved; contended, %d workers, %d rounds of %v", backend, p, scaled(eachPA)*time.Duration(len(ls)), workersP, roundsP, scaled(eachP))
	ws := make([][]primWorker, len(ls))
	single := make([]worker, len(ls))
	ss := make([]*serial, len(ls))
	sent := make([]*atomic.Int64, len(ls))
	keys := make([]string, len(ls))
	for i, l := range ls {
		for range workersP {
			ws[i] = append(ws[i], l.open(t))
		}
		defer func() {
			for _, w := range ws[i] {
				w.close()
			}
		}()
		single[i] = worker{lock: ws[i][0].take}
		ss[i], sent[i], keys[i] = &r.primRun(l).serial, &atomic.Int64{}, l.name+"/p/"+p+"/a"
		var warm serial
		warm.countAllocs(single[i], keys[i], scaled(warmUpP)) // create what the first grant creates
	}
	interleaved(single, ss, sent, keys, scaled(eachPA)*time.Duration(len(ls)))
	for i, l := range ls {
		var warm primRun
		warm.run(ws[i], readers, limit, l.name+"/p/"+p+"/b", hold, scaled(warmUpP))
	}
	for round := range roundsP {
		for i, l := range ls {
			pr := r.primRun(l)
			pr.run(ws[i], readers, limit, l.name+"/p/"+p+"/b", hold, scaled(eachP))
			r.progress("  round %d %-22s %8.0f uncontended ops/s %8.1f grants/s contended, gave up %d", round+1, l.name, pr.serial.opsPerSec(), pr.grantsPerSec(), pr.errors)
		}
	}
}

func (r *report) primRun(l *primLib) *primRun {
	if r.primRuns[l] == nil {
		r.primRuns[l] = &primRun{}
	}
	return r.primRuns[l]
}

// primBackend is a backend's primitives under test.
type primBackend struct {
	name        string
	libs        []*primLib
	unsupported []string // dlock's primitives the backend does not have
}

func newPrimBackend(t testing.TB, name string, open dlockOpener, incumbents ...*primLib) *primBackend {
	libs, unsupported := dlockPrims(t, name, open)
	// Each primitive's incumbents right after dlock's.
	for _, in := range incumbents {
		i := slices.IndexFunc(libs, func(l *primLib) bool { return l.primitive == in.primitive })
		libs = slices.Insert(libs, i+1, in)
	}
	return &primBackend{name: name, libs: libs, unsupported: unsupported}
}

// openURL opens dlock clients of the backend at rawURL.
func openURL(rawURL string) dlockOpener {
	return func(t testing.TB) *dlock.Client { return openDlock(t, rawURL, ttl) }
}
