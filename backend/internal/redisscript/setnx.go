package redisscript

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
)

// Layout says where the keys of a lock are.
type Layout string

const (
	// Hashed is dlock's own layout: every key of a lock under the prefix,
	// with a hash of the name as the Redis Cluster hash tag (see the
	// package documentation).
	Hashed Layout = ""
	// SetNX is the layout of compat=setnx: the lock key is the name
	// itself, set with SET NX PX as redis-py's Lock, redsync, bsm/redislock
	// and redlock-py set it, so that their locks and dlock's exclude each
	// other. dlock's own keys of the lock (fence counter, wake-up channel)
	// are under the prefix.
	SetNX Layout = "setnx"
)

// Layouts are the values of the compat URL parameter of the Redis
// backends.
var Layouts = []string{string(SetNX)}

// ParseLayout returns the layout of a WithCompat option: "" (Hashed) or
// one of Layouts. backend names the caller in the error.
func ParseLayout(backend, s string) (Layout, error) {
	if s != "" && !slices.Contains(Layouts, s) {
		return "", fmt.Errorf("%w: %s: WithCompat(%q): want one of %s", dlock.ErrInvalidOption, backend, s, strings.Join(Layouts, ", "))
	}
	return Layout(s), nil
}

// Keys returns the keys of lock name under prefix.
func (l Layout) Keys(prefix, name string) Keys {
	if l != SetNX {
		return KeysFor(prefix, name)
	}
	base := prefix + ":setnx:"
	k := Keys{
		Name: name, Lock: name, Fence: base + "fence:" + name, Queue: base + "queue:" + name,
		Waiters: base + "waiters:" + name, Channel: base + "wake:" + name,
	}
	return k
}

// SetNXFencePattern is the SCAN pattern of the fence keys of the SetNX
// layout under prefix.
func SetNXFencePattern(prefix string) string { return globEscape(prefix+":setnx:fence:") + "*" }

// LockOfFence returns the lock key of the lock whose fence key is fence,
// in either layout.
func LockOfFence(prefix, fence string) string {
	if name, ok := strings.CutPrefix(fence, prefix+":setnx:fence:"); ok {
		return name
	}
	return strings.TrimSuffix(fence, "fence") + "lock"
}

// PermitsOfFence returns the permits and holders keys of the semaphore
// whose fence key is fence, or "" in the SetNX layout, which has no
// semaphores.
func PermitsOfFence(prefix, fence string) (permits, holders string) {
	if strings.HasPrefix(fence, prefix+":setnx:fence:") {
		return "", ""
	}
	base := strings.TrimSuffix(fence, "fence")
	return base + "permits", base + "holders"
}

// CheckName refuses, in the SetNX layout, a name that is one of dlock's
// own keys (it begins with "<prefix>:"): the lock key is the name, so
// such a name could be another lock's fence counter.
func (l Layout) CheckName(prefix, name string) error {
	if l == SetNX && strings.HasPrefix(name, prefix+":") {
		return fmt.Errorf("%w: redis compat=setnx: %q begins with %q, which is reserved for dlock's own keys (its fence counters); choose another key prefix with the URL parameter prefix=",
			driver.ErrInvalidName, name, prefix+":")
	}
	return nil
}

// ReadSetNX reports the state of a lock in the SetNX layout, in one round
// trip. A value that is not dlock's value for this name is a foreign
// holder's (redis-py's random token, redsync's, …): the lock is held, by
// an owner of unknown identity, with no token; Value.Owner is then the
// whole value, by which Redlock's nodes agree on one holder.
func (k *Keys) ReadSetNX(ctx context.Context, rdb redis.Cmdable) (State, error) {
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, k.Lock)
		pttl = p.PTTL(ctx, k.Lock)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return State{}, err
	}
	v, err := get.Result()
	if err != nil {
		return State{}, nil // free
	}
	st := State{Held: true, Name: k.Name, PTTL: max(pttl.Val(), 0)}
	if pv, err := ParseValue(v); err == nil && pv.Name == k.Name {
		st.Value = pv
	} else {
		st.Foreign, st.Value.Owner = true, v
	}
	return st, nil
}

// ForeignHolder is the holder metadata Inspect reports for a lock held by
// another library: its value says nothing dlock can read.
var ForeignHolder = []byte(`{"note":"another library's SET NX lock: holder unknown, no fencing token"}`)

// ScanSetNX returns the names of SetNX-layout locks on rdb's server: with
// a name prefix, every string key that begins with it (the lock keys are
// the application's own, so only the application's prefix can find
// them); without one, the names dlock has ever locked, from their fence
// counters under dlockPrefix.
func ScanSetNX(ctx context.Context, rdb redis.UniversalClient, dlockPrefix, prefix string) ([]string, error) {
	pattern, strip := globEscape(prefix)+"*", ""
	if prefix == "" {
		strip = dlockPrefix + ":setnx:fence:"
		pattern = SetNXFencePattern(dlockPrefix)
	}
	var names []string
	err := EachMaster(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		it := c.ScanType(ctx, 0, pattern, 1000, "string").Iterator()
		for it.Next(ctx) {
			key := it.Val()
			if strip == "" && strings.HasPrefix(key, dlockPrefix+":") {
				continue // dlock's own keys are not locks
			}
			names = append(names, strings.TrimPrefix(key, strip))
		}
		return it.Err()
	})
	return names, err
}

// globEscape quotes the characters special to SCAN's MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\^`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// KeyspaceConfig is the notify-keyspace-events setting that makes a
// server announce the deletion and expiry of every key: K (keyspace
// channels), g (DEL and other generic commands), x (expiries). A
// setting that contains them, or K and A, will do.
const KeyspaceConfig = "Kgx"

// KeyspaceEvents reports whether rdb's server (every master) announces
// deletions and expiries on its keyspace channels. A server that refuses
// CONFIG GET cannot be asked: false, with the error.
func KeyspaceEvents(ctx context.Context, rdb redis.UniversalClient) (bool, error) {
	cfgs, err := ServerConfig(ctx, rdb, "notify-keyspace-events")
	if err != nil {
		return false, err
	}
	for _, cfg := range cfgs {
		f := cfg["notify-keyspace-events"]
		if !strings.Contains(f, "K") || !(strings.Contains(f, "A") || strings.Contains(f, "g") && strings.Contains(f, "x")) {
			return false, nil
		}
	}
	return len(cfgs) > 0, nil
}

// KeyspaceChannel is the channel on which a server with keyspace events
// announces what happens to key in database db.
func KeyspaceChannel(db int, key string) string {
	return fmt.Sprintf("__keyspace@%d__:%s", db, key)
}

// SetNXPoll is how often a waiter in the SetNX layout looks at a lock
// when the server does not announce deletions: a foreign release
// publishes nothing dlock hears. Each pause is spread over [SetNXPoll/2,
// SetNXPoll] (driver.Jitter), so waiters do not look in lockstep;
// redis-py's Lock, for comparison, retries every 100ms.
const SetNXPoll = 100 * time.Millisecond

// PollWake sends to wake (without blocking) every driver.Jitter(every),
// until stop is called.
func PollWake(wake chan struct{}, every time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTimer(driver.Jitter(every))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				notify(wake)
				t.Reset(driver.Jitter(every))
			}
		}
	}()
	return func() { close(done) }
}
