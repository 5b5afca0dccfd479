package redislock

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
)

func init() {
	dlock.Register("redis", Open)
	dlock.Register("rediss", Open)
}

// Open connects to the server of a redis:// or rediss:// URL (see the
// package documentation) and checks that it answers and accepts the
// credentials.
func Open(ctx context.Context, u *url.URL) (driver.Driver, error) {
	opt, opts, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opt)
	d := New(rdb, opts...)
	d.closeRDB = true
	if err := d.check(ctx); err != nil {
		_ = d.Close()
		return nil, err
	}
	return d, nil
}

// ParseURL splits a redis:// or rediss:// URL into go-redis options and
// the driver's own options (prefix, waiter_ttl, durable_fencing).
func ParseURL(u *url.URL) (*redis.Options, []Option, error) {
	q := u.Query()
	var opts []Option
	if v := q.Get("prefix"); q.Has("prefix") {
		opts = append(opts, WithPrefix(v))
	}
	if v := q.Get("waiter_ttl"); v != "" {
		ttl, err := time.ParseDuration(v)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: redis URL: waiter_ttl=%q: %v", dlock.ErrInvalidOption, v, err)
		}
		opts = append(opts, WithWaiterTTL(ttl))
	}
	if v := q.Get("durable_fencing"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: redis URL: durable_fencing=%q: want true or false", dlock.ErrInvalidOption, v)
		}
		if b {
			opts = append(opts, WithDurableFencing())
		}
	}
	for _, k := range []string{"prefix", "waiter_ttl", "durable_fencing"} {
		q.Del(k)
	}
	rest := *u
	rest.RawQuery = q.Encode()
	opt, err := redis.ParseURL(rest.String())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: redis URL %s: %v", dlock.ErrInvalidOption, u.Redacted(), err)
	}
	return opt, opts, nil
}

// check pings the server (which authenticates), and verifies a declared
// durable fencing against the server's configuration where CONFIG is
// allowed.
func (d *Driver) check(ctx context.Context) error {
	if d.err != nil {
		return d.err
	}
	if err := d.rdb.Ping(ctx).Err(); err != nil {
		return d.unavailable(ctx, err)
	}
	if d.durable {
		return CheckDurable(ctx, d.rdb, d.where)
	}
	return nil
}

// CheckDurable reports an error if the server's configuration, as CONFIG
// GET shows it, loses acknowledged writes on a crash (appendonly must be
// yes and appendfsync always). A server that refuses CONFIG is trusted.
func CheckDurable(ctx context.Context, rdb redis.UniversalClient, where string) error {
	cfg, err := rdb.ConfigGet(ctx, "append*").Result()
	if err != nil {
		return nil // CONFIG is often disabled or not permitted: trust the declaration
	}
	if cfg["appendonly"] != "yes" || cfg["appendfsync"] != "always" {
		return fmt.Errorf("%w: redis %s: durable_fencing needs appendonly yes and appendfsync always; the server has appendonly %s, appendfsync %s",
			dlock.ErrInvalidOption, where, cfg["appendonly"], cfg["appendfsync"])
	}
	return nil
}
