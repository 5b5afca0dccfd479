package etcdlock

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
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

// DefaultDialTimeout bounds connecting when the URL has no dial-timeout.
const DefaultDialTimeout = 5 * time.Second

// Config is what an etcd:// URL says: how to reach the cluster and where
// the locks live.
type Config struct {
	Endpoints   []string // host:port
	Prefix      string
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
// with the parameters
//
//	prefix=P          key prefix of the locks (default "dlock/")
//	dial-timeout=D    how long connecting may take, a Go duration (default 5s)
//	tls=1             use TLS (implied by etcds:// and by the next three)
//	cacert=FILE       PEM CA bundle to verify the servers (default: system roots)
//	cert=FILE, key=FILE  client certificate and key (both or neither)
//	server-name=NAME  the name to verify the servers' certificates against
//
// A host without a port gets DefaultPort. Errors never contain the password.
func ParseURL(u *url.URL) (Config, error) {
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
	q := u.Query()
	for k := range q {
		switch k {
		case "prefix", "dial-timeout", "tls", "cacert", "cert", "key", "server-name":
		default:
			return bad("unknown parameter %q (known: prefix, dial-timeout, tls, cacert, cert, key, server-name)", k)
		}
	}
	if q.Has("prefix") {
		cfg.Prefix = q.Get("prefix")
	}
	if v := q.Get("dial-timeout"); v != "" {
		dt, err := time.ParseDuration(v)
		if err != nil || dt <= 0 {
			return bad("dial-timeout=%q: want a positive duration such as 5s", v)
		}
		cfg.DialTimeout = dt
	}
	useTLS := scheme == "etcds"
	if v := q.Get("tls"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return bad("tls=%q: want 1 or 0", v)
		}
		useTLS = useTLS || b
	}
	caFile, certFile, keyFile := q.Get("cacert"), q.Get("cert"), q.Get("key")
	if caFile != "" || certFile != "" || keyFile != "" || q.Get("server-name") != "" {
		useTLS = true
	}
	if useTLS {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: q.Get("server-name")}
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				return bad("cacert: %v", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return bad("cacert: no PEM certificate in %s", caFile)
			}
		}
		if (certFile == "") != (keyFile == "") {
			return bad("cert and key go together")
		}
		if certFile != "" {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return bad("cert/key: %v", err)
			}
			tc.Certificates = []tls.Certificate{c}
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
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return Connect(ctx, cfg)
}

// Connect opens a client for cfg, checks that the cluster answers within
// the dial timeout, and returns a driver that owns the client.
func Connect(ctx context.Context, cfg Config) (*Driver, error) {
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
		return nil, fmt.Errorf("%w: etcd %s: %w", driver.ErrUnavailable, strings.Join(cfg.Endpoints, ","), err)
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
	d := New(cli, WithPrefix(cfg.Prefix))
	d.owned = true
	return d, nil
}

func open(ctx context.Context, u *url.URL) (driver.Driver, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return Connect(ctx, cfg)
}
