package redisscript

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
)

// ServerConfig returns CONFIG GET pattern of every master (one server, or
// each master of a cluster), by address. Other clients (a failover
// client) are an error, and so not checked.
func ServerConfig(ctx context.Context, rdb redis.UniversalClient, pattern string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	var mu sync.Mutex
	get := func(ctx context.Context, c *redis.Client) error {
		cfg, err := c.ConfigGet(ctx, pattern).Result()
		if err != nil {
			return err
		}
		mu.Lock()
		out[c.Options().Addr] = cfg
		mu.Unlock()
		return nil
	}
	err := EachMaster(ctx, rdb, get)
	return out, err
}

// evicting reports whether a maxmemory-policy may evict keys: every policy
// but noeviction. allkeys-* may evict keys without a TTL too, such as the
// fence counters.
func evicting(policy string) bool {
	return strings.HasPrefix(policy, "volatile-") || strings.HasPrefix(policy, "allkeys-")
}

// CheckEviction reports an error if a server's maxmemory-policy may evict
// keys (volatile-*, allkeys-*), unless allowed: a lock key has a TTL, so
// such a server may delete a held lock under memory pressure, and grant it
// to another client while the holder still believes it holds it. A
// server that refuses CONFIG GET (disabled or renamed, as on hosted
// Redis) cannot be checked: CheckEviction then logs a warning with
// slog.Default and returns nil. where names rdb in the warning.
func CheckEviction(ctx context.Context, rdb redis.UniversalClient, where string, allowed bool) error {
	cfgs, err := ServerConfig(ctx, rdb, "maxmemory-policy")
	if err != nil {
		slog.Default().WarnContext(ctx, "dlock: cannot read the Redis maxmemory-policy; make sure it is noeviction, or held locks may be evicted",
			"server", where, "error", err)
		return nil
	}
	for addr, cfg := range cfgs {
		policy := cfg["maxmemory-policy"]
		if !evicting(policy) {
			continue
		}
		if allowed {
			slog.Default().WarnContext(ctx, "dlock: the Redis server may evict held locks (allow_eviction=true)",
				"server", addr, "maxmemory-policy", policy)
			continue
		}
		return fmt.Errorf("%w: redis %s: maxmemory-policy is %s, which may evict held locks under memory pressure and grant them to another client (two holders); run CONFIG SET maxmemory-policy noeviction (and set it in redis.conf), or add allow_eviction=true to the URL to accept the risk",
			dlock.ErrInvalidOption, addr, policy)
	}
	return nil
}
