package redislock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/internal/testenv"
)

// Open refuses a server whose maxmemory-policy may evict held locks, with
// an error that names the policy and the command that fixes it, unless the
// URL accepts the risk with allow_eviction=true; noeviction is accepted.
// durable_fencing refuses allkeys-* even then, as it may evict the fence
// counters.
func TestOpenRefusesEvictingPolicy(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	for _, policy := range []string{"allkeys-lru", "volatile-lru", "noeviction"} {
		t.Run(policy, func(t *testing.T) {
			srv := testenv.StartRedis(t, testenv.RedisAOF(), testenv.RedisArgs("--maxmemory-policy", policy))
			c, err := dlock.Open(ctx, "redis://"+srv.Addr)
			if policy == "noeviction" {
				if err != nil {
					t.Fatalf("Open with noeviction: %v", err)
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatalf("Open with maxmemory-policy %s succeeded", policy)
			}
			if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), policy) ||
				!strings.Contains(err.Error(), "CONFIG SET maxmemory-policy noeviction") || !strings.Contains(err.Error(), "allow_eviction=true") {
				t.Errorf("Open with %s = %v; want ErrInvalidOption naming the policy, the CONFIG SET to run and allow_eviction=true", policy, err)
			}
			t.Log(err)
			c = open(t, "redis://"+srv.Addr+"?allow_eviction=true")
			l, err := c.Mutex("k").Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_ = l.Unlock(ctx)

			c, err = dlock.Open(ctx, "redis://"+srv.Addr+"?allow_eviction=true&durable_fencing=true")
			if err == nil {
				c.Close()
			}
			if evictsCounters := strings.HasPrefix(policy, "allkeys-"); evictsCounters != errors.Is(err, dlock.ErrInvalidOption) {
				t.Errorf("durable_fencing with %s: %v", policy, err)
			}
		})
	}
}

// A server where CONFIG is disabled (renamed away, as hosted Redis does)
// cannot be checked: Open warns and goes on.
func TestOpenWithoutConfigCommandWarnsAndOpens(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisArgs("--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", ""))
	ctx := testenv.Context(t, time.Minute)
	var logged bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	c := open(t, "redis://"+srv.Addr)
	if w := logged.String(); !strings.Contains(w, "WARN") || !strings.Contains(w, "maxmemory-policy") || !strings.Contains(w, srv.Addr) {
		t.Errorf("Open of a server without CONFIG logged %q; want a warning about maxmemory-policy naming the server", w)
	}
	l, err := c.Mutex("k").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Unlock(ctx)
}

// What an evicting policy does to a held lock, with allow_eviction=true:
// under memory pressure the server deletes the lock key (here the only key
// with a TTL, under volatile-lru, so it is the one evicted), another client
// can be granted the lock at once — two holders — and the evicted holder
// learns it at its next renewal: its lease ends with ErrLeaseLost. The
// fence counter, which has no TTL, survives, so the new token is higher.
func TestEvictedLockIsLostAtNextRenewal(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t, time.Minute)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	c := open(t, "redis://"+srv.Addr+"?allow_eviction=true")
	l, err := c.Mutex("evicted", dlock.WithTTL(3*time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lockKeys, err := admin.Keys(ctx, "dlock:*:lock").Result()
	if err != nil || len(lockKeys) != 1 {
		t.Fatalf("lock keys %v, %v", lockKeys, err)
	}

	info, err := admin.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(info, "used_memory:")
	used, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]), 10, 64)
	if err != nil {
		t.Fatalf("used_memory in %q: %v", info, err)
	}
	for _, kv := range [][2]string{{"maxmemory", strconv.FormatInt(used+4<<20, 10)}, {"maxmemory-policy", "volatile-lru"}} {
		if err := admin.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	value := strings.Repeat("x", 64<<10)
	evicted := false
	for i := 0; i < 1000 && !evicted; i++ { // 64MB at most
		if err := admin.Set(ctx, "fill:"+strconv.Itoa(i), value, 0).Err(); err != nil && !strings.HasPrefix(err.Error(), "OOM") {
			t.Fatal(err)
		}
		n, err := admin.Exists(ctx, lockKeys[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		evicted = n == 0
	}
	if !evicted {
		t.Fatal("the lock key was not evicted")
	}
	if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}

	other := open(t, "redis://"+srv.Addr+"?allow_eviction=true")
	next, err := other.Mutex("evicted").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the eviction: %v", err)
	}
	defer next.Unlock(ctx)
	if next.Token() <= l.Token() {
		t.Errorf("token %d after the eviction, want > %d", next.Token(), l.Token())
	}
	waitLeaseLost(t, ctx, l)
}

// waitLeaseLost waits for l to end, which must be with ErrLeaseLost.
func waitLeaseLost(t *testing.T, ctx context.Context, l *dlock.Lease) {
	t.Helper()
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("the holder's lease did not end")
	}
	if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
		t.Errorf("the holder's lease ended with %v, want ErrLeaseLost", l.Err())
	}
}

// FLUSHALL deletes locks and fence counters alike, even on a server that
// persists every write: another client is granted the held lock at once,
// with tokens started again at 1, and the holder learns it at its next
// renewal. The package documents this.
func TestFlushAllFreesLocksAndRestartsTokens(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisAOF())
	ctx := testenv.Context(t, time.Minute)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	c := open(t, "redis://"+srv.Addr+"?durable_fencing=true")
	var l *dlock.Lease
	for range 3 {
		var err error
		if l, err = c.Mutex("flushed", dlock.WithTTL(3*time.Second)).Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if l.Token() < 3 {
			_ = l.Unlock(ctx)
		}
	}
	if err := admin.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	next, err := open(t, "redis://"+srv.Addr).Mutex("flushed").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after FLUSHALL: %v", err)
	}
	defer next.Unlock(ctx)
	if next.Token() != 1 {
		t.Errorf("token after FLUSHALL = %d (before: %d); the package documents a restart at 1", next.Token(), l.Token())
	}
	waitLeaseLost(t, ctx, l)
}
