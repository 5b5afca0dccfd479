package zklock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
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

// Open connects to the ensemble named by a zk:// URL (see the package
// documentation) and waits for a session.
func Open(ctx context.Context, u *url.URL) (*Driver, error) {
	cfg, err := parseURL(ctx, u)
	if err != nil {
		return nil, err
	}
	d := newDriver()
	d.ownConn, d.events = true, true
	d.root, d.compat = cfg.root, cfg.compat
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
			d.event(ev)
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

// debugLogger passes go-zookeeper's log lines (failed connects,
// reconnects) to the logger given to dlock.Open, at debug level: the
// errors that matter reach the caller as errors.
type debugLogger struct{ l *slog.Logger }

func (z debugLogger) Printf(format string, args ...any) {
	z.l.Debug("zookeeper: " + fmt.Sprintf(format, args...))
}

type config struct {
	hosts          []string
	root           string
	compat         string
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
		{Name: "compat", Usage: "write and read the lock nodes of another library's recipe (kazoo, curator); the lock name is its lock path", Set: driver.ChoiceParam(&cfg.compat, Layouts...)},
		{Name: "connect_timeout", Usage: "how long Open waits for the first session", Set: driver.DurationParam(&cfg.connectTimeout), Deprecated: []string{"connect-timeout"}},
	}}
	if _, err := params.Parse(ctx, u.Query()); err != nil {
		return config{}, err
	}
	if cfg.compat != "" && u.Path != "" {
		return bad("with compat=%s the lock name is the full lock path, so the URL takes no root (%q)", cfg.compat, u.Path)
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
