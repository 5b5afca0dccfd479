package memlock

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
)

func init() {
	dlock.Register("mem", func(ctx context.Context, u *url.URL) (driver.Driver, error) {
		if u.Path != "" && u.Path != "/" {
			return nil, fmt.Errorf("%w: mem URL %q: only mem:// or mem://NAME is allowed", dlock.ErrInvalidOption, u.Redacted())
		}
		if _, err := (driver.Params{Backend: "mem"}).Parse(ctx, u.Query()); err != nil {
			return nil, err
		}
		return New(Named(u.Host)), nil
	})
}

var (
	namedMu sync.Mutex
	named   = map[string]*Server{}
)

// Named returns the process-wide Server called name, creating it on first
// use.
func Named(name string) *Server {
	namedMu.Lock()
	defer namedMu.Unlock()
	s, ok := named[name]
	if !ok {
		s = NewServer()
		named[name] = s
	}
	return s
}

// Server holds the lock state that its Drivers share, like an engine. The
// state of a name is kept after release, for its token.
type Server struct {
	mu    sync.Mutex
	locks map[string]*lockState
}

type lockState struct {
	token     uint64        // last token granted
	holders   []*holding    // in grant order: one for a mutex, up to the limit for a semaphore
	queue     []*waiter     // fair waiters, in arrival order
	changed   chan struct{} // closed and replaced when the lock frees
	recovered bool          // the lock last ended without a release
}

type holding struct {
	owner   string
	token   uint64
	limit   int  // the Request's Limit, at least 1
	shared  bool // a reader of a read-write lock
	meta    []byte
	expires time.Time
	timer   *time.Timer
	lost    *driver.Signal // fired when broken or expired
}

type waiter struct {
	req     driver.Request
	granted chan driver.Grant // buffered; receives the hand-off
}

// NewServer returns an empty Server.
func NewServer() *Server { return &Server{locks: map[string]*lockState{}} }

func (s *Server) state(name string) *lockState {
	st, ok := s.locks[name]
	if !ok {
		st = &lockState{changed: make(chan struct{})}
		s.locks[name] = st
	}
	return st
}

// limit is a request's number of permits: 1 for a mutex.
func limit(req driver.Request) int { return max(req.Limit, 1) }

// admits reports whether req may be granted beside the current holders: a
// reader while only readers hold, anyone else while fewer than its limit
// hold.
func (st *lockState) admits(req driver.Request) bool {
	if req.Shared {
		return !slices.ContainsFunc(st.holders, func(h *holding) bool { return !h.shared })
	}
	return len(st.holders) < limit(req)
}

// holding returns the holding of owner, or nil.
func (st *lockState) holding(owner string) *holding {
	for _, h := range st.holders {
		if h.owner == owner {
			return h
		}
	}
	return nil
}

// free ends the holding h (released says how) and hands the permits now
// free to the head of the fair queue, or wakes the unfair waiters. s.mu
// is held.
func (s *Server) free(name string, st *lockState, h *holding, released bool) {
	h.timer.Stop()
	if !released {
		h.lost.Fire()
	}
	for i, o := range st.holders {
		if o == h {
			st.holders = append(st.holders[:i], st.holders[i+1:]...)
			break
		}
	}
	st.recovered = !released
	for len(st.queue) > 0 && st.admits(st.queue[0].req) {
		w := st.queue[0]
		st.queue = st.queue[1:]
		w.granted <- s.grant(name, st, w.req)
	}
	close(st.changed)
	st.changed = make(chan struct{})
}

// grant makes req a holder. s.mu is held.
func (s *Server) grant(name string, st *lockState, req driver.Request) driver.Grant {
	st.token++
	h := &holding{owner: req.Owner, token: st.token, limit: limit(req), shared: req.Shared, meta: req.Holder, expires: time.Now().Add(req.TTL), lost: driver.NewSignal()}
	h.timer = time.AfterFunc(req.TTL, func() { s.expire(name, h) })
	st.holders = append(st.holders, h)
	g := driver.Grant{Token: h.token, Since: driver.Now(), Lost: h.lost, Recovered: st.recovered}
	st.recovered = false
	return g
}

func (s *Server) expire(name string, h *holding) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.locks[name]; st != nil && st.holding(h.owner) == h {
		s.free(name, st, h, false)
	}
}

// Driver is one client of a Server.
type Driver struct {
	s *Server

	mu          sync.Mutex
	partitioned chan struct{} // non-nil while partitioned; closed on heal
	closed      bool
}

// New returns a client of s.
func New(s *Server) *Driver { return &Driver{s: s} }

// SetPartitioned makes every call of this client block until its context
// ends (and fail with ErrUnavailable), as if the network to the server were
// cut, until SetPartitioned(false).
func (d *Driver) SetPartitioned(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case on && d.partitioned == nil:
		d.partitioned = make(chan struct{})
	case !on && d.partitioned != nil:
		close(d.partitioned)
		d.partitioned = nil
	}
}

// reach waits out a partition; it fails if ctx ends first or d is closed.
func (d *Driver) reach(ctx context.Context) error {
	d.mu.Lock()
	p, closed := d.partitioned, d.closed
	d.mu.Unlock()
	if closed {
		return fmt.Errorf("%w: memlock client closed", driver.ErrUnavailable)
	}
	if p == nil {
		return nil
	}
	select {
	case <-p:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: partitioned: %w", driver.ErrUnavailable, ctx.Err())
	}
}

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Fair: true, LockDelay: true, Semaphore: true, RWMutex: true, MinTTL: time.Millisecond, InProcess: true}
}

// Acquire implements driver.Driver.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := d.reach(ctx); err != nil {
		return driver.Grant{}, err
	}
	s := d.s
	for {
		s.mu.Lock()
		st := s.state(req.Name)
		if st.admits(req) && len(st.queue) == 0 {
			g := s.grant(req.Name, st, req)
			s.mu.Unlock()
			return g, nil
		}
		if !req.Wait {
			s.mu.Unlock()
			return driver.Grant{}, driver.ErrNotAcquired
		}
		if req.Fair {
			w := &waiter{req: req, granted: make(chan driver.Grant, 1)}
			st.queue = append(st.queue, w)
			s.mu.Unlock()
			return d.awaitTurn(ctx, req, w)
		}
		changed := st.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return driver.Grant{}, ctx.Err()
		}
	}
}

// awaitTurn waits for a fair hand-off; a waiter that gives up leaves the
// queue, or passes on a grant that raced with its giving up.
func (d *Driver) awaitTurn(ctx context.Context, req driver.Request, w *waiter) (driver.Grant, error) {
	s := d.s
	select {
	case g := <-w.granted:
		return g, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-w.granted: // granted just now: give it back
		if st := s.locks[req.Name]; st != nil {
			if h := st.holding(req.Owner); h != nil {
				s.free(req.Name, st, h, true)
			}
		}
	default:
		if st := s.locks[req.Name]; st != nil {
			for i, q := range st.queue {
				if q == w {
					st.queue = append(st.queue[:i], st.queue[i+1:]...)
					break
				}
			}
		}
	}
	return driver.Grant{}, ctx.Err()
}

// Extend implements driver.Driver.
func (d *Driver) Extend(ctx context.Context, h driver.Held, ttl time.Duration) error {
	if err := d.reach(ctx); err != nil {
		return err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.locks[h.Name]
	if st == nil || st.holding(h.Owner) == nil {
		return driver.ErrLeaseLost
	}
	hd := st.holding(h.Owner)
	hd.expires = time.Now().Add(ttl)
	hd.timer.Reset(ttl)
	return nil
}

// Release implements driver.Driver.
func (d *Driver) Release(ctx context.Context, h driver.Held) error {
	if err := d.reach(ctx); err != nil {
		return err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.locks[h.Name]
	if st == nil || st.holding(h.Owner) == nil {
		return driver.ErrLeaseLost
	}
	s.free(h.Name, st, st.holding(h.Owner), true)
	return nil
}

func info(name string, st *lockState) driver.Info {
	in := driver.Info{Name: name}
	for i, h := range st.holders {
		left := max(time.Until(h.expires), 0)
		if i == 0 {
			in.Held, in.Token, in.Holder, in.ExpiresIn = true, h.token, h.meta, left
		}
		if h.limit > 1 || h.shared {
			in.Permits = append(in.Permits, driver.Permit{Token: h.token, Holder: h.meta, ExpiresIn: left})
		}
	}
	for _, w := range st.queue {
		in.Waiters = append(in.Waiters, w.req.Holder)
	}
	return in
}

// Inspect implements driver.Driver.
func (d *Driver) Inspect(ctx context.Context, name string) (driver.Info, error) {
	if err := d.reach(ctx); err != nil {
		return driver.Info{}, err
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	if st := d.s.locks[name]; st != nil {
		return info(name, st), nil
	}
	return driver.Info{Name: name}, nil
}

// List implements driver.Driver.
func (d *Driver) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	if err := d.reach(ctx); err != nil {
		return nil, err
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	var out []driver.Info
	for name, st := range d.s.locks {
		if strings.HasPrefix(name, prefix) && (len(st.holders) > 0 || len(st.queue) > 0) {
			out = append(out, info(name, st))
		}
	}
	return out, nil
}

// Break implements driver.Driver.
func (d *Driver) Break(ctx context.Context, name string) error {
	if err := d.reach(ctx); err != nil {
		return err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.locks[name]
	if st == nil || len(st.holders) == 0 {
		return driver.ErrNotHeld
	}
	for _, h := range slices.Clone(st.holders) { // every permit of a semaphore, not those it hands on
		if st.holding(h.owner) == h {
			s.free(name, st, h, false)
		}
	}
	return nil
}

// Close implements driver.Driver.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	return nil
}
