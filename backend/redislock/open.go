package redislock

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
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
	p, err := parseParams(ctx, u)
	if err != nil {
		return nil, err
	}
	var rdb redis.UniversalClient
	var addrs []string
	var dialTimeout time.Duration
	if p.cluster {
		copt, err := p.clusterOptions()
		if err != nil {
			return nil, err
		}
		c := redis.NewClusterClient(copt)
		rdb, addrs, dialTimeout = c, copt.Addrs, c.Options().DialTimeout
	} else {
		opt, err := p.options()
		if err != nil {
			return nil, err
		}
		c := redis.NewClient(opt)
		rdb, addrs, dialTimeout = c, []string{opt.Addr}, c.Options().DialTimeout
	}
	redisscript.RouteLogs()
	d, err := New(rdb, p.opts...)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	d.closeRDB = true
	// go-redis retries a refused dial five times, with back-off, before
	// the ping fails: dial once first, to report it at once.
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	err = driver.DialAny(dctx, addrs)
	cancel()
	if err != nil {
		_ = d.Close()
		return nil, d.unavailable(ctx, err)
	}
	if err := d.check(ctx); err != nil {
		_ = d.Close()
		return nil, err
	}
	return d, nil
}

// ParseURL splits a redis:// or rediss:// URL into go-redis options and
// the driver's own options (prefix, waiter_ttl, durable_fencing,
// allow_eviction). A deprecated spelling of a parameter is logged on
// slog.Default; Open logs it on the logger given to dlock.Open.
func ParseURL(u *url.URL) (*redis.Options, []Option, error) {
	p, err := parseParams(context.Background(), u)
	if err != nil {
		return nil, nil, err
	}
	opt, err := p.options()
	return opt, p.opts, err
}

// ParseClusterURL splits a Redis Cluster URL, redis[s]://host:port?addr=
// host2:port2&addr=host3:port3 (or with cluster=true and a single seed),
// into go-redis cluster options and the driver's own options.
func ParseClusterURL(u *url.URL) (*redis.ClusterOptions, []Option, error) {
	p, err := parseParams(context.Background(), u)
	if err != nil {
		return nil, nil, err
	}
	opt, err := p.clusterOptions()
	return opt, p.opts, err
}

// urlParams is what a Redis URL says, split between the driver and go-redis.
type urlParams struct {
	u       *url.URL // as given, for errors
	rest    *url.URL // u with go-redis's parameters only
	opts    []Option
	tls     driver.TLSFiles
	cluster bool // addr= parameters (more seed nodes) or cluster=true
}

func parseParams(ctx context.Context, u *url.URL) (urlParams, error) {
	p := urlParams{u: u}
	var prefix string
	var waiterTTL time.Duration
	var eviction, durable bool
	var hasPrefix bool
	var compat string
	params := redisscript.Params("redis", &p.tls,
		driver.Param{Name: "compat", Usage: "lock the key named by the lock name, as other libraries do (setnx)", Set: driver.ChoiceParam(&compat, redisscript.Layouts...)},
		driver.Param{Name: "prefix", Usage: "first part of every key", Set: func(v string) error {
			prefix, hasPrefix = v, true
			return nil
		}},
		driver.Param{Name: "waiter_ttl", Usage: "how long a silent waiter keeps its place", Set: driver.DurationParam(&waiterTTL)},
		driver.Param{Name: "allow_eviction", Usage: "accept a server whose maxmemory-policy may evict locks", Set: driver.BoolParam(&eviction)},
		driver.Param{Name: "durable_fencing", Usage: "declare that the server persists every write", Set: driver.BoolParam(&durable)},
		driver.Param{Name: "cluster", Usage: "Redis Cluster from one seed node", Set: driver.BoolParam(&p.cluster)},
	)
	rest, err := params.Parse(ctx, u.Query())
	if err != nil {
		return urlParams{}, err
	}
	p.cluster = p.cluster || rest.Has("addr")
	if hasPrefix {
		p.opts = append(p.opts, WithPrefix(prefix))
	}
	if compat != "" {
		p.opts = append(p.opts, WithCompat(compat))
	}
	if waiterTTL > 0 {
		p.opts = append(p.opts, WithWaiterTTL(waiterTTL))
	}
	if eviction {
		p.opts = append(p.opts, WithEvictionAllowed())
	}
	if durable {
		p.opts = append(p.opts, WithDurableFencing())
	}
	r := *u
	r.RawQuery = rest.Encode()
	p.rest = &r
	return p, nil
}

func (p urlParams) options() (*redis.Options, error) {
	opt, err := redis.ParseURL(p.rest.String())
	if err != nil {
		return nil, fmt.Errorf("%w: redis URL %s: %v", dlock.ErrInvalidOption, p.u.Redacted(), err)
	}
	if err := redisscript.ApplyTLS(p.u, opt.TLSConfig, p.tls, "rediss"); err != nil {
		return nil, err
	}
	return opt, nil
}

func (p urlParams) clusterOptions() (*redis.ClusterOptions, error) {
	rest := *p.rest
	if path := strings.Trim(rest.Path, "/"); path != "" && path != "0" {
		return nil, fmt.Errorf("%w: redis URL %s: Redis Cluster has only database 0, not %q", dlock.ErrInvalidOption, p.u.Redacted(), path)
	}
	rest.Path = ""
	opt, err := redis.ParseClusterURL(rest.String())
	if err != nil {
		return nil, fmt.Errorf("%w: redis URL %s: %v", dlock.ErrInvalidOption, p.u.Redacted(), err)
	}
	if err := redisscript.ApplyTLS(p.u, opt.TLSConfig, p.tls, "rediss"); err != nil {
		return nil, err
	}
	return opt, nil
}

// check pings the server (which authenticates), refuses a server that may
// evict lock keys unless that was allowed, and verifies a declared durable
// fencing against the server's configuration where CONFIG is allowed.
func (d *Driver) check(ctx context.Context) error {
	if err := d.rdb.Ping(ctx).Err(); err != nil {
		return d.unavailable(ctx, err)
	}
	if err := CheckEviction(ctx, d.rdb, d.where, d.evictionAllowed); err != nil {
		return err
	}
	if d.layout == redisscript.SetNX && !d.keyspace {
		on, err := redisscript.KeyspaceEvents(ctx, d.rdb)
		d.keyspace = on
		if !on {
			driver.Logger(ctx).DebugContext(ctx, "dlock: redis compat=setnx: the server does not announce deletions and expiries, so waiters poll; CONFIG SET notify-keyspace-events "+redisscript.KeyspaceConfig+" has them woken",
				"server", d.where, "poll", redisscript.SetNXPoll, "error", err)
		}
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
