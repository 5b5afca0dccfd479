package redlock

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/driver"
)

func init() {
	dlock.Register("redlock", Open)
	dlock.Register("redlocks", Open)
}

// Open connects to the nodes of a redlock:// URL, or over TLS of a
// redlocks:// URL (see the package documentation). It fails if a majority of the nodes cannot be reached,
// or if any node refuses the credentials.
func Open(ctx context.Context, u *url.URL) (driver.Driver, error) {
	if u.Host == "" {
		return nil, fmt.Errorf("%w: redlock URL %s names no nodes; want redlock://h1:6379,h2:6379,h3:6379", dlock.ErrInvalidOption, u.Redacted())
	}
	var opts []Option
	var tf driver.TLSFiles
	var eviction bool
	var compat string
	params := redisscript.Params("redlock", &tf,
		driver.Param{Name: "compat", Usage: "lock the key named by the lock name, as other libraries do (setnx)", Set: driver.ChoiceParam(&compat, redisscript.Layouts...)},
		driver.Param{Name: "prefix", Usage: "first part of every key", Set: func(v string) error {
			opts = append(opts, WithPrefix(v))
			return nil
		}},
		driver.Param{Name: "allow_eviction", Usage: "accept nodes whose maxmemory-policy may evict locks", Set: driver.BoolParam(&eviction)},
	)
	q, err := params.Parse(ctx, u.Query())
	if err != nil {
		return nil, err
	}
	if eviction {
		opts = append(opts, WithEvictionAllowed())
	}
	if compat != "" {
		opts = append(opts, WithCompat(compat))
	}
	scheme := "redis"
	if strings.EqualFold(u.Scheme, "redlocks") {
		scheme = "rediss"
	}
	var clients []redis.UniversalClient
	fail := func(err error) (driver.Driver, error) {
		for _, c := range clients {
			c.Close()
		}
		return nil, err
	}
	for _, host := range strings.Split(u.Host, ",") {
		nu := url.URL{Scheme: scheme, User: u.User, Host: host, Path: u.Path, RawQuery: q.Encode()}
		opt, err := redis.ParseURL(nu.String())
		if err != nil {
			return fail(fmt.Errorf("%w: redlock URL %s: node %q: %v", dlock.ErrInvalidOption, u.Redacted(), host, err))
		}
		if err := redisscript.ApplyTLS(u, opt.TLSConfig, tf, "redlocks"); err != nil {
			return fail(err)
		}
		// go-redis ignores a context's deadline unless told: without this a
		// silent node costs its 3 s read timeout, not the driver's per-call
		// bound, and a short TTL has no validity left.
		opt.ContextTimeoutEnabled = true
		clients = append(clients, redis.NewClient(opt))
	}
	redisscript.RouteLogs()
	d, err := New(clients, opts...)
	if err != nil {
		return fail(err)
	}
	d.closeRDB = true
	if err := d.check(ctx); err != nil {
		_ = d.Close()
		return nil, err
	}
	return d, nil
}

// check pings every node: a majority must answer, and none may refuse the
// credentials or have a maxmemory-policy that may evict locks (unless
// allowed; see redislock's package documentation).
func (d *Driver) check(ctx context.Context) error {
	if d.err != nil {
		return d.err
	}
	rs := d.each(ctx, nil, adminCallTimeout, func(ctx context.Context, n *node) reply {
		return reply{ok: true, err: n.rdb.Ping(ctx).Err()}
	})
	t := count(rs)
	for _, err := range t.errs {
		if msg := err.Error(); strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "NOPERM") {
			return err
		}
	}
	if t.ok < d.quorum {
		return d.unreachable(ctx, "open", t)
	}
	for i, r := range rs {
		if r.err == nil {
			n := d.nodes[i]
			if err := redisscript.CheckEviction(ctx, n.rdb, n.where, d.evictionAllowed); err != nil {
				return err
			}
			if d.layout == redisscript.SetNX {
				n.keyspace, _ = redisscript.KeyspaceEvents(ctx, n.rdb)
			}
		}
	}
	return nil
}
