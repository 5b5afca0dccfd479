package zklock

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
)

// Defaults of the URL parameters.
const (
	DefaultRoot           = "/dlock"
	DefaultSessionTimeout = 10 * time.Second
	DefaultConnectTimeout = 15 * time.Second
)

func init() {
	dlock.Register("zk", func(ctx context.Context, u *url.URL) (driver.Driver, error) {
		return Open(ctx, u)
	})
}

// Driver is a dlock driver over one ZooKeeper connection and session.
type Driver struct {
	conn    *zk.Conn
	ownConn bool // Close closes conn
	root    string
	acl     []zk.ACL

	sessionTimeout atomic.Int64 // negotiated, in nanoseconds
	minTTL         time.Duration

	closed    chan struct{}
	closeOnce sync.Once

	aliveMu sync.Mutex
	alive   struct {
		sent    time.Time // send time of the last request the server answered
		session int64     // the session it was answered in
	}
}

// Option configures a Driver made by New.
type Option func(*Driver) error

// WithRoot sets the node under which lock parents live (default /dlock).
func WithRoot(path string) Option {
	return func(d *Driver) error {
		root, err := cleanRoot(path)
		if err != nil {
			return err
		}
		d.root = root
		return nil
	}
}

// WithACL sets the ACL of every node the driver creates (default
// zk.WorldACL(zk.PermAll)). The connection must carry the matching
// credentials (zk.Conn.AddAuth).
func WithACL(acl []zk.ACL) Option {
	return func(d *Driver) error {
		if len(acl) == 0 {
			return fmt.Errorf("%w: zklock.WithACL: the ACL is empty", dlock.ErrInvalidOption)
		}
		d.acl = acl
		return nil
	}
}

// WithSessionTimeout tells New the session timeout the server negotiated
// for its connection — the one asked of zk.Connect, when it lies within the
// server's minSessionTimeout..maxSessionTimeout. New needs it, because
// go-zookeeper does not expose it and the lease is derived from it (see
// the package documentation). Open, which makes its own connection, reads
// it from the handshake.
func WithSessionTimeout(d time.Duration) Option {
	return func(dr *Driver) error {
		if d <= 0 {
			return fmt.Errorf("%w: zklock.WithSessionTimeout(%v): must be positive", dlock.ErrInvalidOption, d)
		}
		dr.sessionTimeout.Store(int64(d))
		dr.minTTL = d
		return nil
	}
}

// New returns a driver over a connection the caller made and keeps
// owning: Close leaves it open. WithSessionTimeout is required. Its errors
// wrap dlock.ErrInvalidOption.
func New(conn *zk.Conn, opts ...Option) (*Driver, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: zklock.New: conn is nil", dlock.ErrInvalidOption)
	}
	d := newDriver()
	d.conn = conn
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(d); err != nil {
			return nil, err
		}
	}
	if d.minTTL == 0 {
		return nil, fmt.Errorf("%w: zklock.New: give WithSessionTimeout, the session timeout asked of zk.Connect", dlock.ErrInvalidOption)
	}
	return d, nil
}

func newDriver() *Driver {
	return &Driver{root: DefaultRoot, acl: zk.WorldACL(zk.PermAll), closed: make(chan struct{})}
}

// Open connects to the ensemble named by a zk:// URL (see the package
// documentation) and waits for a session.
func Open(ctx context.Context, u *url.URL) (*Driver, error) {
	cfg, err := parseURL(ctx, u)
	if err != nil {
		return nil, err
	}
	d := newDriver()
	d.ownConn = true
	d.root = cfg.root
	d.sessionTimeout.Store(int64(cfg.sessionTimeout)) // until the server's handshake reply says
	if cfg.user != "" {
		d.acl = zk.DigestACL(zk.PermAll, cfg.user, cfg.password)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.connectTimeout)
	defer cancel()
	if err := driver.DialAny(ctx, cfg.hosts); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: zookeeper %s: no session: %w", driver.ErrUnavailable, strings.Join(cfg.hosts, ","), ctx.Err())
		}
		return nil, fmt.Errorf("%w: zookeeper %s: %w", driver.ErrUnavailable, strings.Join(cfg.hosts, ","), err)
	}
	up := make(chan struct{})
	var upOnce sync.Once
	conn, _, err := zk.Connect(cfg.hosts, cfg.sessionTimeout,
		zk.WithDialer(d.dial),
		zk.WithLogger(debugLogger{driver.Logger(ctx)}),
		zk.WithLogInfo(false),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type == zk.EventSession && ev.State == zk.StateHasSession {
				upOnce.Do(func() { close(up) })
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("%w: zookeeper %s: %w", driver.ErrUnavailable, strings.Join(cfg.hosts, ","), err)
	}
	d.conn = conn
	select {
	case <-up:
	case <-ctx.Done():
		conn.Close()
		return nil, fmt.Errorf("%w: zookeeper %s: no session: %w", driver.ErrUnavailable, strings.Join(cfg.hosts, ","), ctx.Err())
	}
	d.minTTL = d.session()
	if cfg.user != "" {
		auth := []byte(cfg.user + ":" + cfg.password)
		if _, err := call(ctx, func() (struct{}, error) { return struct{}{}, conn.AddAuth("digest", auth) }); err != nil {
			conn.Close()
			return nil, fmt.Errorf("%w: zookeeper: digest authentication as %q: %w", driver.ErrUnavailable, cfg.user, err)
		}
	}
	return d, nil
}

type config struct {
	hosts          []string
	root           string
	user, password string
	sessionTimeout time.Duration
	connectTimeout time.Duration
}

func parseURL(ctx context.Context, u *url.URL) (config, error) {
	cfg := config{sessionTimeout: DefaultSessionTimeout, connectTimeout: DefaultConnectTimeout}
	bad := func(format string, args ...any) (config, error) {
		return config{}, fmt.Errorf("%w: zk URL %q: %s", dlock.ErrInvalidOption, u.Redacted(), fmt.Sprintf(format, args...))
	}
	if u.Scheme != "zk" {
		return bad("the scheme must be zk")
	}
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return bad("empty host in the host list")
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), "2181")
		}
		cfg.hosts = append(cfg.hosts, h)
	}
	root := u.Path
	if root == "" {
		root = DefaultRoot
	}
	var err error
	if cfg.root, err = cleanRoot(root); err != nil {
		return bad("%v", err)
	}
	if u.User != nil {
		cfg.user = u.User.Username()
		cfg.password, _ = u.User.Password()
		if cfg.user == "" {
			return bad("digest authentication needs a user name")
		}
	}
	params := driver.Params{Backend: "zk", List: []driver.Param{
		{Name: "session_timeout", Usage: "the session timeout asked of the server", Set: driver.DurationParam(&cfg.sessionTimeout), Deprecated: []string{"session-timeout"}},
		{Name: "connect_timeout", Usage: "how long Open waits for the first session", Set: driver.DurationParam(&cfg.connectTimeout), Deprecated: []string{"connect-timeout"}},
	}}
	if _, err := params.Parse(ctx, u.Query()); err != nil {
		return config{}, err
	}
	return cfg, nil
}

// cleanRoot checks a root path: absolute, not "/", no empty, "." or ".."
// segment; a trailing "/" is dropped.
func cleanRoot(p string) (string, error) {
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return "", errors.New(`the root must not be "/": locks would mix with ZooKeeper's own nodes`)
	}
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("the root %q must be an absolute path", p)
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", fmt.Errorf("the root %q has an empty, \".\" or \"..\" segment", p)
		}
	}
	return p, nil
}

// dial connects to one server and notes the session timeout that the
// server's handshake reply negotiates (go-zookeeper does not expose it).
func (d *Driver) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &handshakeConn{Conn: c, d: d}, nil
}

// handshakeConn reads the session timeout from the first reply on a new
// connection: the connect response, which starts with its length, the
// protocol version and the negotiated timeout in milliseconds (int32s, big
// endian). It also bounds the wait for that reply (see SetReadDeadline).
type handshakeConn struct {
	net.Conn
	d    *Driver
	n    int
	head [12]byte
}

// SetReadDeadline shortens the wait for the first byte of the handshake's
// reply to two thirds of the session timeout: the limit go-zookeeper puts
// on a silent established connection, where for the handshake it allows
// ten times that. A ZooKeeper server that is starting up can accept a
// connection and never answer its handshake; waiting ten times longer on
// it outlasts the session (a restarted server expires the restored sessions
// whose clients do not come back within their timeout) and stalls every
// lock of the driver for that long, when trying again would have reached
// the server as soon as it serves.
func (c *handshakeConn) SetReadDeadline(t time.Time) error {
	if c.n == 0 && !t.IsZero() {
		if limit := time.Now().Add(c.d.session() * 2 / 3); t.After(limit) {
			t = limit
		}
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *handshakeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.n < len(c.head) && n > 0 {
		c.n += copy(c.head[c.n:], p[:n])
		if c.n == len(c.head) {
			if ms := int32(binary.BigEndian.Uint32(c.head[8:12])); ms > 0 {
				c.d.sessionTimeout.Store(int64(time.Duration(ms) * time.Millisecond))
			}
		}
	}
	return n, err
}

// debugLogger passes go-zookeeper's log lines (failed connects,
// reconnects) to the logger given to dlock.Open, at debug level: the
// errors that matter reach the caller as errors.
type debugLogger struct{ l *slog.Logger }

func (z debugLogger) Printf(format string, args ...any) {
	z.l.Debug("zookeeper: " + fmt.Sprintf(format, args...))
}

// session is the negotiated session timeout.
func (d *Driver) session() time.Duration { return time.Duration(d.sessionTimeout.Load()) }

// leaseTTL is the lease a grant carries: two thirds of the session timeout
// (see the package documentation).
func (d *Driver) leaseTTL() time.Duration { return d.session() * 2 / 3 }

// Capabilities: FIFO queue, czxid tokens, sessions.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Fair: true, DurableFencing: true, Sessions: true, MinTTL: d.minTTL}
}

// Conn returns the driver's ZooKeeper connection.
func (d *Driver) Conn() *zk.Conn { return d.conn }

// Close stops the driver's background work and, if Open made the
// connection, closes it, which ends the session: ZooKeeper deletes the
// session's nodes, so locks still held are freed at once.
func (d *Driver) Close() error {
	d.closeOnce.Do(func() {
		close(d.closed)
		if d.ownConn {
			d.conn.Close()
		}
	})
	return nil
}

func (d *Driver) isClosed() bool {
	select {
	case <-d.closed:
		return true
	default:
		return false
	}
}

// confirm records that a request sent at sent was answered.
func (d *Driver) confirm(sent time.Time) {
	s := d.conn.SessionID()
	d.aliveMu.Lock()
	if s != d.alive.session || sent.After(d.alive.sent) {
		d.alive.sent, d.alive.session = sent, s
	}
	d.aliveMu.Unlock()
}

// confirmedSince returns the send time of the last answered request of
// session, or zero.
func (d *Driver) confirmedSince(session int64) time.Time {
	d.aliveMu.Lock()
	defer d.aliveMu.Unlock()
	if d.alive.session != session {
		return time.Time{}
	}
	return d.alive.sent
}

// lockPath is the parent node of a lock name's queue.
func (d *Driver) lockPath(name string) string { return d.root + "/" + escapeName(name) }

// call runs a ZooKeeper request, which go-zookeeper cannot cancel, and
// returns when it completes or ctx ends. A request left behind completes
// in the background: go-zookeeper answers or fails every request, at the
// latest when the connection is given up.
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if ctx.Done() == nil {
		return f()
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// roundTrip is call for requests whose answer proves the session alive at
// the leader: writes, and syncs (with the read that follows them). A
// plain read does not, since a follower cut off from the leader still
// answers it.
func roundTrip[T any](ctx context.Context, d *Driver, f func() (T, error)) (T, error) {
	sent := driver.Now()
	v, err := call(ctx, f)
	if err == nil || answered(err) {
		d.confirm(sent)
	}
	return v, err
}

// retry is call for idempotent requests: it tries again while the
// connection is down, for up to a session timeout (by then the session is
// gone too), or until ctx ends. Its answers confirm no lease (see
// roundTrip).
func retry[T any](ctx context.Context, d *Driver, f func() (T, error)) (T, error) {
	give := time.Now().Add(d.session())
	for try := 0; ; try++ {
		v, err := call(ctx, f)
		if err == nil || !transient(err) || time.Now().After(give) || d.isClosed() {
			return v, err
		}
		if err := requestRetry.Wait(ctx, try); err != nil {
			return v, err
		}
	}
}

// transient reports a failure of the connection, after which the request
// may or may not have been applied and may be retried.
func transient(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved)
}

// answered reports an error that is the server's reply.
func answered(err error) bool {
	for _, e := range []error{zk.ErrNoNode, zk.ErrNodeExists, zk.ErrNotEmpty, zk.ErrBadVersion,
		zk.ErrNoAuth, zk.ErrNoChildrenForEphemerals, zk.ErrInvalidACL} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// fail turns a request's error into the driver's (driver.Classify).
func (d *Driver) fail(ctx context.Context, op string, err error) error {
	if d.isClosed() {
		op += ": the driver is closed"
	}
	return driver.Classify(ctx, "zookeeper "+op, err)
}

// Pauses between attempts while the connection is down: a caller's request
// retries promptly; a clean-up in the background, which nobody waits for,
// backs off further; a Lock whose session ended while queued pauses a
// moment before queueing again in the new session.
var (
	requestRetry = driver.Backoff{Base: 10 * time.Millisecond, Cap: 500 * time.Millisecond, Jitter: 0.5}
	cleanupRetry = driver.Backoff{Base: 10 * time.Millisecond, Cap: time.Second, Jitter: 0.5}
	requeuePause = driver.Backoff{Base: 50 * time.Millisecond, Cap: 50 * time.Millisecond, Jitter: 0.5}
)
