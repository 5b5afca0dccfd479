package dlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dlock/dlock/driver"
)

// MaxNameLen is the longest lock name, in bytes.
const MaxNameLen = 1024

// Client is a connection to one backend. It is safe for concurrent use.
type Client struct {
	d    driver.Driver
	caps driver.Capabilities
	o    options

	mu     sync.Mutex
	leases map[*Lease]struct{}
	closed bool
}

// New returns a Client over a backend driver (for example
// redislock.New(rdb)). Options given here are the defaults of every Mutex.
func New(d driver.Driver, opts ...Option) *Client {
	return &Client{d: d, caps: d.Capabilities(), o: defaultOptions().with(opts), leases: map[*Lease]struct{}{}}
}

// OpenFunc opens a backend's driver from a URL whose scheme it registered.
type OpenFunc func(ctx context.Context, u *url.URL) (driver.Driver, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]OpenFunc{}
)

// Register makes a backend available to Open under a URL scheme. Backends
// call it from an init function; it panics if the scheme is taken, as
// sql.Register does.
func Register(scheme string, open OpenFunc) {
	registryMu.Lock()
	defer registryMu.Unlock()
	scheme = strings.ToLower(scheme)
	if _, dup := registry[scheme]; dup {
		panic("dlock: Register called twice for scheme " + scheme)
	}
	registry[scheme] = open
}

// Schemes lists the registered URL schemes, sorted.
func Schemes() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	s := make([]string, 0, len(registry))
	for k := range registry {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// Open connects to the backend named by rawURL's scheme (etcd://, redis://,
// redlock://, zk://, postgres://, mysql://, temporal://, mem://, …); the
// backend's package must be imported. Passwords in rawURL never appear in
// the errors it returns. The logger of a WithLogger option reaches the
// backend too (see driver.Logger): it logs there the warning for a
// deprecated URL parameter, and its client library's own log lines, at
// debug level.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error quotes the whole URL, password included: keep only
		// its reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%w: backend URL %q: %v", ErrInvalidOption, Redact(rawURL), err)
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("%w: backend URL %q has no scheme; registered: %s", ErrInvalidOption, Redact(rawURL), strings.Join(Schemes(), ", "))
	}
	registryMu.RLock()
	open, ok := registry[strings.ToLower(u.Scheme)]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: backend URL %q: unknown scheme %q; registered: %s", ErrInvalidOption, Redact(rawURL), u.Scheme, strings.Join(Schemes(), ", "))
	}
	if o := defaultOptions().with(opts); o.loggerSet {
		ctx = driver.WithLogger(ctx, o.logger)
	}
	d, err := open(ctx, u)
	if err != nil {
		return nil, redactErr(err, rawURL)
	}
	return New(d, opts...), nil
}

// Redact returns rawURL with every secret replaced by "xxxxx", for
// printing: the user-info password (or API key), and the values of query
// parameters that carry one (password=, sslpassword=, and any parameter
// named like a password, secret or token). File names (sslkey=, tls-key=)
// stay readable.
func Redact(rawURL string) string {
	return redactURL(rawURL)
}

// redactErr removes the secrets of rawURL (see Redact) from err's message,
// should a backend's error have quoted them.
func redactErr(err error, rawURL string) error {
	return redactError(err, rawURL)
}

// Capabilities reports what the backend promises.
func (c *Client) Capabilities() driver.Capabilities { return c.caps }

// Driver returns the backend driver, for backend-specific operations.
func (c *Client) Driver() driver.Driver { return c.d }

// Close releases the leases this client still holds, including those
// whose Unlock failed and whose deadline has not passed (best effort,
// within driver.CleanupTimeout), and closes the backend connection. Leases it could not
// release expire on the backend after their TTL.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	held := make([]*Lease, 0, len(c.leases))
	for l := range c.leases {
		held = append(held, l)
	}
	c.mu.Unlock()
	ctx, cancel := driver.CleanupContext(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for _, l := range held {
		wg.Add(1)
		go func() { defer wg.Done(); _ = l.Unlock(ctx) }()
	}
	wg.Wait()
	return c.d.Close()
}

func (c *Client) track(l *Lease) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.leases[l] = struct{}{}
	return true
}

func (c *Client) untrack(l *Lease) {
	c.mu.Lock()
	delete(c.leases, l)
	c.mu.Unlock()
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Do runs fn while holding the lock name: it waits for the lock, calls fn,
// and always releases the lock afterwards — Go's counterpart of Python's
// "with lock:". The context passed to fn is cancelled as soon as the lease
// is lost; fn should stop its work then, and pass Lease.Token to the
// resource it writes so that a write already in flight is refused.
//
// Do returns fn's error. If the lease was lost while fn ran, the returned
// error also wraps ErrLeaseLost, even when fn returned nil, since fn's work
// may not have been exclusive.
//
// The release after fn is made even if ctx has ended by then, within
// driver.CleanupTimeout. If fn panics, Do releases the lock the same way
// and then lets the panic continue with its own value, so that a panic
// recovered further up (as HTTP servers do) does not leave the lock held.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context, l *Lease) error, opts ...Option) error {
	if fn == nil {
		return fmt.Errorf("%w: Do: fn is nil", ErrInvalidOption)
	}
	l, err := c.Mutex(name, opts...).Lock(ctx)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(l.ctx, func() { cancel(l.Err()) })
	defer stop()

	returned := false
	defer func() {
		if !returned {
			// fn panicked (or called runtime.Goexit): release the lock before
			// the panic unwinds further, since whoever recovers it cannot.
			uctx, ucancel := driver.CleanupContext(ctx)
			defer ucancel()
			_ = l.Unlock(uctx)
		}
	}()
	ferr := fn(fctx, l)
	returned = true

	lostErr := l.Err() // before Unlock, which ends the lease normally
	uctx, ucancel := driver.CleanupContext(ctx)
	defer ucancel()
	uerr := l.Unlock(uctx)
	if lostErr != nil && errors.Is(lostErr, ErrLeaseLost) {
		return errors.Join(ferr, lostErr)
	}
	if ferr != nil {
		return ferr
	}
	if uerr != nil && !errors.Is(uerr, ErrNotHeld) {
		return uerr
	}
	return nil
}

// Info is the state of one lock, as Inspect and List report it.
type Info struct {
	Name string
	// Held reports whether someone holds the lock.
	Held bool
	// Token is the holder's fencing token.
	Token uint64
	// Holder describes the holder, as it described itself.
	Holder Holder
	// ExpiresIn is the time left on the holder's lease by the backend's
	// clock, or 0 where the backend does not say (session-based locks).
	ExpiresIn time.Duration
	// Waiters are the queued waiters in order, on backends that keep a queue.
	Waiters []Holder
}

// Holder is the metadata a lease carries about its owner: which host and
// process took it, when (by the holder's clock), and a note (WithNote).
type Holder struct {
	Host       string    `json:"host,omitempty"`
	PID        int       `json:"pid,omitempty"`
	Note       string    `json:"note,omitempty"`
	AcquiredAt time.Time `json:"acquired_at,omitzero"`
}

func decodeHolder(b []byte) Holder {
	var h Holder
	if len(b) > 0 && json.Unmarshal(b, &h) != nil {
		h.Note = string(b) // not ours: show it as it is
	}
	return h
}

func infoFrom(di driver.Info) Info {
	in := Info{Name: di.Name, Held: di.Held, Token: di.Token, ExpiresIn: di.ExpiresIn}
	if di.Held {
		in.Holder = decodeHolder(di.Holder)
	}
	for _, w := range di.Waiters {
		in.Waiters = append(in.Waiters, decodeHolder(w))
	}
	return in
}

// Inspect reports who holds the lock name, its token and expiry, and who
// waits for it.
func (c *Client) Inspect(ctx context.Context, name string) (Info, error) {
	if err := c.usable(name); err != nil {
		return Info{}, err
	}
	di, err := c.d.Inspect(ctx, name)
	if err != nil {
		return Info{}, classify(ctx, err)
	}
	return infoFrom(di), nil
}

// List reports the locks whose names begin with prefix ("" for all) that
// are held or waited on.
func (c *Client) List(ctx context.Context, prefix string) ([]Info, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	if len(prefix) > MaxNameLen || !utf8.ValidString(prefix) {
		return nil, fmt.Errorf("%w: prefix must be at most %d bytes of valid UTF-8", ErrInvalidName, MaxNameLen)
	}
	dis, err := c.d.List(ctx, prefix)
	if err != nil {
		return nil, classify(ctx, err)
	}
	out := make([]Info, 0, len(dis))
	for _, di := range dis {
		out = append(out, infoFrom(di))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Break frees the lock name whoever holds it — an administrator's tool for
// a stuck holder. The holder learns at its next renewal (within about a
// third of its TTL, at once on some backends): its Done channel closes and
// its Do context is cancelled. The next grant gets a higher token, so the
// broken holder's late writes can be refused. Break of a free lock returns
// ErrNotHeld.
func (c *Client) Break(ctx context.Context, name string) error {
	if err := c.usable(name); err != nil {
		return err
	}
	return classify(ctx, c.d.Break(ctx, name))
}

func (c *Client) usable(name string) error {
	if c.isClosed() {
		return ErrClosed
	}
	return ValidateName(name)
}

// ValidateName checks the naming rule: 1..1024 bytes of valid UTF-8. Any
// such string is a valid name on every backend; backends with a narrower key
// space escape or hash it.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: the name is empty; it must be 1..%d bytes of UTF-8", ErrInvalidName, MaxNameLen)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: the name is %d bytes; the limit is %d", ErrInvalidName, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: the name is not valid UTF-8", ErrInvalidName)
	}
	return nil
}

// classify holds a driver's error to the contract for a driver that does
// not classify its errors itself (a third-party one returning its engine's
// raw errors): driver.Classify, which changes nothing in an error it made,
// so the errors of dlock's own backends pass unchanged. ErrInvalidOption,
// which a driver returns for bad input, is an answer too.
func classify(ctx context.Context, err error) error {
	if errors.Is(err, ErrInvalidOption) {
		return err
	}
	return driver.Classify(ctx, "", err)
}

var hostname = sync.OnceValue(func() string {
	h, _ := os.Hostname()
	return h
})

// holderPrefix is the constant start of this process's holder metadata:
// its host and PID, as encoding/json writes them.
var holderPrefix = sync.OnceValue(func() []byte {
	b, _ := json.Marshal(Holder{Host: hostname(), PID: os.Getpid()})
	return b[:len(b)-1] // without the closing brace
})

// encodeHolder returns the JSON of Holder{host, PID, note, at}, exactly as
// json.Marshal writes it, without reflecting over the struct on every Lock.
func encodeHolder(note string, at time.Time) []byte {
	p := holderPrefix()
	b := make([]byte, 0, len(p)+len(note)+64)
	b = append(b, p...)
	sep := func() {
		if len(b) > 1 {
			b = append(b, ',')
		}
	}
	if note != "" {
		n, _ := json.Marshal(note)
		sep()
		b = append(b, `"note":`...)
		b = append(b, n...)
	}
	if !at.IsZero() {
		sep()
		b = append(b, `"acquired_at":"`...)
		b = at.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	return append(b, '}')
}
