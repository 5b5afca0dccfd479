package redislock

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/driver"
)

func init() {
	dlock.Register("redis", Open)
	dlock.Register("rediss", Open)
}

// Open connects to the server of a redis:// or rediss:// URL, or to the
// Redis Cluster of a URL with addr= parameters or cluster=true (see the
// package documentation), and checks that it answers and accepts the
// credentials.
func Open(ctx context.Context, u *url.URL) (driver.Driver, error) {
	var rdb redis.UniversalClient
	var opts []Option
	if cluster, err := isClusterURL(u); err != nil {
		return nil, err
	} else if cluster {
		copt, o, err := ParseClusterURL(u)
		if err != nil {
			return nil, err
		}
		rdb, opts = redis.NewClusterClient(copt), o
	} else {
		opt, o, err := ParseURL(u)
		if err != nil {
			return nil, err
		}
		rdb, opts = redis.NewClient(opt), o
	}
	d := New(rdb, opts...)
	d.closeRDB = true
	if err := d.check(ctx); err != nil {
		_ = d.Close()
		return nil, err
	}
	return d, nil
}

// isClusterURL reports whether u names a Redis Cluster: it has addr=
// parameters (more seed nodes, as in go-redis's ParseClusterURL) or
// cluster=true.
func isClusterURL(u *url.URL) (bool, error) {
	q := u.Query()
	if v := q.Get("cluster"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("%w: redis URL: cluster=%q: want true or false", dlock.ErrInvalidOption, v)
		}
		return b || q.Has("addr"), nil
	}
	return q.Has("addr"), nil
}

// ParseURL splits a redis:// or rediss:// URL into go-redis options and
// the driver's own options (prefix, waiter_ttl, durable_fencing).
func ParseURL(u *url.URL) (*redis.Options, []Option, error) {
	opts, rest, tlsParams, err := ownParams(u)
	if err != nil {
		return nil, nil, err
	}
	opt, err := redis.ParseURL(rest.String())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: redis URL %s: %v", dlock.ErrInvalidOption, u.Redacted(), err)
	}
	if err := tlsParams.Apply(u, opt.TLSConfig, "rediss"); err != nil {
		return nil, nil, err
	}
	return opt, opts, nil
}

// ParseClusterURL splits a Redis Cluster URL, redis[s]://host:port?addr=
// host2:port2&addr=host3:port3 (or with cluster=true and a single seed),
// into go-redis cluster options and the driver's own options.
func ParseClusterURL(u *url.URL) (*redis.ClusterOptions, []Option, error) {
	opts, rest, tlsParams, err := ownParams(u)
	if err != nil {
		return nil, nil, err
	}
	if p := strings.Trim(rest.Path, "/"); p != "" && p != "0" {
		return nil, nil, fmt.Errorf("%w: redis URL %s: Redis Cluster has only database 0, not %q", dlock.ErrInvalidOption, u.Redacted(), p)
	}
	rest.Path = ""
	opt, err := redis.ParseClusterURL(rest.String())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: redis URL %s: %v", dlock.ErrInvalidOption, u.Redacted(), err)
	}
	if err := tlsParams.Apply(u, opt.TLSConfig, "rediss"); err != nil {
		return nil, nil, err
	}
	return opt, opts, nil
}

// ownParams takes the driver's own parameters out of u.
func ownParams(u *url.URL) ([]Option, *url.URL, redisscript.TLSParams, error) {
	q := u.Query()
	var opts []Option
	if v := q.Get("prefix"); q.Has("prefix") {
		opts = append(opts, WithPrefix(v))
	}
	if v := q.Get("waiter_ttl"); v != "" {
		ttl, err := time.ParseDuration(v)
		if err != nil {
			return nil, nil, redisscript.TLSParams{}, fmt.Errorf("%w: redis URL: waiter_ttl=%q: %v", dlock.ErrInvalidOption, v, err)
		}
		opts = append(opts, WithWaiterTTL(ttl))
	}
	for _, f := range []struct {
		param string
		opt   Option
	}{{"allow_eviction", WithEvictionAllowed()}, {"durable_fencing", WithDurableFencing()}} {
		if v := q.Get(f.param); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, nil, redisscript.TLSParams{}, fmt.Errorf("%w: redis URL: %s=%q: want true or false", dlock.ErrInvalidOption, f.param, v)
			}
			if b {
				opts = append(opts, f.opt)
			}
		}
	}
	tp := redisscript.TakeTLSParams(q)
	for _, k := range []string{"prefix", "waiter_ttl", "durable_fencing", "allow_eviction", "cluster"} {
		q.Del(k)
	}
	rest := *u
	rest.RawQuery = q.Encode()
	return opts, &rest, tp, nil
}

// check pings the server (which authenticates), refuses a server that may
// evict lock keys unless that was allowed, and verifies a declared durable
// fencing against the server's configuration where CONFIG is allowed.
func (d *Driver) check(ctx context.Context) error {
	if d.err != nil {
		return d.err
	}
	if err := d.rdb.Ping(ctx).Err(); err != nil {
		return d.unavailable(ctx, err)
	}
	if err := CheckEviction(ctx, d.rdb, d.where, d.evictionAllowed); err != nil {
		return err
	}
	if d.durable {
		return CheckDurable(ctx, d.rdb, d.where)
	}
	return nil
}

// CheckEviction reports an error if a server's maxmemory-policy may evict
// keys (volatile-*, allkeys-*), unless allowed: a lock key has a TTL, so
// such a server may delete a held lock under memory pressure, and grant it
// to another client while the holder still believes it holds it. A
// server that refuses CONFIG GET (disabled or renamed, as on hosted
// Redis) cannot be checked: CheckEviction then logs a warning with
// slog.Default and returns nil. Open calls it; call it yourself with New.
func CheckEviction(ctx context.Context, rdb redis.UniversalClient, where string, allowed bool) error {
	return redisscript.CheckEviction(ctx, rdb, where, allowed)
}

// CheckDurable reports an error if the server's configuration, as CONFIG
// GET shows it, loses acknowledged writes on a crash (appendonly must be
// yes and appendfsync always) or may evict keys without a TTL, such as
// the fence counters (an allkeys-* maxmemory-policy). A server that
// refuses CONFIG is trusted, with a warning logged by slog.Default.
func CheckDurable(ctx context.Context, rdb redis.UniversalClient, where string) error {
	cfgs, err := redisscript.ServerConfig(ctx, rdb, "*")
	if err != nil {
		slog.Default().WarnContext(ctx, "dlock: cannot read the Redis configuration to check durable_fencing; trusting the declaration",
			"server", where, "error", err)
		return nil
	}
	for addr, cfg := range cfgs {
		if cfg["appendonly"] != "yes" || cfg["appendfsync"] != "always" {
			return fmt.Errorf("%w: redis %s: durable_fencing needs appendonly yes and appendfsync always; the server has appendonly %s, appendfsync %s",
				dlock.ErrInvalidOption, addr, cfg["appendonly"], cfg["appendfsync"])
		}
		if p := cfg["maxmemory-policy"]; strings.HasPrefix(p, "allkeys-") {
			return fmt.Errorf("%w: redis %s: durable_fencing needs a maxmemory-policy that never evicts the fence counters; %s may: run CONFIG SET maxmemory-policy noeviction",
				dlock.ErrInvalidOption, addr, p)
		}
	}
	return nil
}
