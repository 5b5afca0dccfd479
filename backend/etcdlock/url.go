package etcdlock

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
)

func init() {
	dlock.Register("etcd", open)
	dlock.Register("etcds", open)
}

// DefaultPort is used for a URL host without a port.
const DefaultPort = "2379"

// DefaultDialTimeout bounds connecting when the URL has no connect_timeout.
const DefaultDialTimeout = 5 * time.Second

// Config is what an etcd:// URL says: how to reach the cluster and where
// the locks live.
type Config struct {
	Endpoints   []string // host:port
	Prefix      string
	Compat      string // "" (dlock's layout) or CompatEtcdctl: see WithCompat
	Username    string
	Password    string
	DialTimeout time.Duration
	TLS         *tls.Config // nil for plain TCP
}

// ParseURL reads a URL of the form
//
//	etcd://[user:password@]host1:2379[,host2:2379…][/][?param=value&…]
//	etcds://…   (TLS)
//
// with the parameters prefix, compat, connect_timeout, tls, ca, cert, key
// and server_name (see the README's table of URL parameters; tls is implied by
// etcds:// and by each of the last four). A host without a port gets
// DefaultPort. Errors never contain the password. A deprecated spelling of
// a parameter is logged on slog.Default; Open logs it on the logger given
// to dlock.Open.
func ParseURL(u *url.URL) (Config, error) {
	return parseURL(context.Background(), u)
}

func parseURL(ctx context.Context, u *url.URL) (Config, error) {
	cfg := Config{Prefix: DefaultPrefix, DialTimeout: DefaultDialTimeout}
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: etcd URL %q: %s", dlock.ErrInvalidOption, u.Redacted(), fmt.Sprintf(format, args...))
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "etcd" && scheme != "etcds" {
		return bad("the scheme must be etcd or etcds")
	}
	if u.Opaque != "" {
		return bad("write etcd://host:port, with two slashes")
	}
	if u.Path != "" && u.Path != "/" {
		return bad("unexpected path %q; the key prefix is the prefix= parameter", u.Path)
	}
	if u.Host == "" {
		return bad("no host; write etcd://host:2379")
	}
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return bad("empty host in the host list")
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), DefaultPort)
			if _, _, err := net.SplitHostPort(h); err != nil {
				return bad("bad host %q", h)
			}
		}
		cfg.Endpoints = append(cfg.Endpoints, h)
	}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
		if cfg.Username == "" {
			return bad("a password needs a user name")
		}
	}
	useTLS := scheme == "etcds"
	hasPrefix := false
	var tf driver.TLSFiles
	params := driver.Params{Backend: "etcd", List: append([]driver.Param{
		{Name: "prefix", Usage: "key prefix of the locks", Set: func(v string) error {
			cfg.Prefix, hasPrefix = v, true
			return nil
		}},
		{Name: "connect_timeout", Usage: "how long connecting may take", Set: driver.DurationParam(&cfg.DialTimeout), Deprecated: []string{"dial-timeout"}},
		{Name: "tls", Usage: "use TLS", Set: driver.BoolParam(&useTLS)},
	}, driver.TLSParams(&tf)...)}
	params.List[3].Deprecated = []string{"cacert"}      // ca
	params.List[6].Deprecated = []string{"server-name"} // server_name
	params.List = append(params.List, driver.Param{Name: "compat", Usage: "lock the keys etcdctl lock and concurrency.Mutex use (etcdctl)", Set: driver.ChoiceParam(&cfg.Compat, Layouts...)})
	if _, err := params.Parse(ctx, u.Query()); err != nil {
		return Config{}, err
	}
	if hasPrefix && cfg.Compat != "" {
		return bad("prefix does not apply with compat=%s, where the lock name is the key prefix itself, as etcdctl lock takes it", cfg.Compat)
	}
	if useTLS || scheme == "etcds" || tf.Set() {
		tc, err := tf.Config(nil)
		if err != nil {
			return bad("%v", err)
		}
		cfg.TLS = tc
	}
	return cfg, nil
}

// Open connects to the cluster a URL names (see ParseURL) and checks that
// it answers. The driver owns the client: Close closes it.
func Open(ctx context.Context, rawURL string) (*Driver, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: etcd URL %q: cannot parse", dlock.ErrInvalidOption, dlock.Redact(rawURL))
	}
	cfg, err := parseURL(ctx, u)
	if err != nil {
		return nil, err
	}
	return Connect(ctx, cfg)
}

// Connect opens a client for cfg, checks that the cluster answers within
// the dial timeout, and returns a driver that owns the client.
func Connect(ctx context.Context, cfg Config) (*Driver, error) {
	where := strings.Join(cfg.Endpoints, ",")
	if plainAddrs(cfg.Endpoints) {
		// clientv3 retries a refused dial until the dial timeout, in
		// silence: dial once first, to report it at once.
		dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
		err := driver.DialAny(dctx, cfg.Endpoints)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("%w: etcd %s: %w", driver.ErrUnavailable, where, err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		Username:    cfg.Username,
		Password:    cfg.Password,
		TLS:         cfg.TLS,
		Logger:      zap.NewNop(), // errors reach the caller; etcd's retries are noise
		Context:     context.WithoutCancel(ctx),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: etcd %s: %w", driver.ErrUnavailable, where, err)
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if _, err := cli.Get(cctx, cfg.Prefix, clientv3.WithCountOnly(), clientv3.WithPrefix()); err != nil {
		cli.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: etcd %s: %w", driver.ErrUnavailable, strings.Join(cfg.Endpoints, ","), err)
	}
	d := newDriver(cli)
	d.prefix = cfg.Prefix
	d.compat = cfg.Compat
	d.owned = true
	return d, nil
}

// plainAddrs reports whether every endpoint is host:port, as ParseURL
// makes them (a Config may also hold URLs such as https://h:2379 or
// unix:// sockets, which clientv3 dials itself).
func plainAddrs(endpoints []string) bool {
	for _, e := range endpoints {
		if _, _, err := net.SplitHostPort(e); err != nil || strings.Contains(e, "://") {
			return false
		}
	}
	return len(endpoints) > 0
}

func open(ctx context.Context, u *url.URL) (driver.Driver, error) {
	cfg, err := parseURL(ctx, u)
	if err != nil {
		return nil, err
	}
	return Connect(ctx, cfg)
}
