package redisscript

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock/driver"
)

var (
	//go:embed value.lua
	valueLib string
	//go:embed queue.lua
	queueLib string
	//go:embed acquire.lua
	acquireSrc string
	//go:embed fair_acquire.lua
	fairAcquireSrc string
	//go:embed leave_queue.lua
	leaveQueueSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed break.lua
	breakSrc string
	//go:embed set_token.lua
	setTokenSrc string
)

// The scripts, each with the helpers of value.lua in front and those of
// queue.lua where it says --@queue.
var (
	acquire     = script(acquireSrc)
	fairAcquire = script(fairAcquireSrc)
	leaveQueue  = script(leaveQueueSrc)
	extend      = script(extendSrc)
	release     = script(releaseSrc)
	breakLock   = script(breakSrc)
	setToken    = script(setTokenSrc)
)

const queueMark = "--@queue\n"

func script(src string) *luaScript {
	return newLuaScript(valueLib + strings.Replace(src, queueMark, queueLib, 1))
}

// DefaultPrefix begins every key dlock writes, unless configured otherwise.
const DefaultPrefix = "dlock"

// CheckPrefix reports a key prefix that would break the key layout.
func CheckPrefix(p string) error {
	if p == "" || strings.ContainsAny(p, "{}") {
		return fmt.Errorf("key prefix %q must be non-empty and contain neither '{' nor '}' (they would change the Redis Cluster hash tag)", p)
	}
	return nil
}

// Keys are the Redis keys of one lock.
type Keys struct {
	Name                        string
	Lock, Fence, Queue, Channel string
	// Waiters is the prefix of the waiters' entry keys: a waiter's entry
	// is Waiters + its owner key (see queue.lua).
	Waiters string
	// Permits and Holders are a semaphore's (see permits.lua); "" in a
	// layout without semaphores.
	Permits, Holders string
}

// KeysFor returns the keys of lock name under prefix.
func KeysFor(prefix, name string) Keys {
	base := prefix + ":{" + driver.NameHash(name) + "}:"
	k := Keys{
		Name: name, Lock: base + "lock", Fence: base + "fence", Queue: base + "queue",
		Waiters: base + "waiter:", Channel: base + "wake",
		Permits: base + "permits", Holders: base + "holders",
	}
	return k
}

// KeyCache remembers the keys of the names a driver locked last, so that a
// program that locks the same names again and again does not hash each
// name and build its five keys on every call. It is direct-mapped (a name
// goes in one of 256 slots, by a hash of it), so it stays small however
// many names are locked; safe for concurrent use. Its Keys are shared:
// never modify them.
type KeyCache struct {
	prefix string
	layout Layout
	seed   maphash.Seed
	slots  [256]atomic.Pointer[Keys]
}

// NewKeyCache returns a cache of the keys of names under prefix, in
// layout.
func NewKeyCache(prefix string, layout Layout) *KeyCache {
	return &KeyCache{prefix: prefix, layout: layout, seed: maphash.MakeSeed()}
}

// Get returns the keys of name.
func (c *KeyCache) Get(name string) *Keys {
	slot := &c.slots[maphash.String(c.seed, name)%uint64(len(c.slots))]
	if k := slot.Load(); k != nil && k.Name == name {
		return k
	}
	k := c.layout.Keys(c.prefix, name)
	slot.Store(&k)
	return &k
}

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// TokenMode says where acquire takes the token from.
type TokenMode string

const (
	// Incr: the token is the next value of the node's fence counter.
	Incr TokenMode = "incr"
	// Fair: as Incr, but only if no live waiter is queued.
	Fair TokenMode = "fair"
	// FairFirst: as Incr, but only if nobody is queued; a queue, even of
	// waiters that are gone, is left to FairAcquire, which looks at who is
	// in it (n is then QueueFound). It is the first attempt of a fair Lock,
	// which queues if not granted: it sends two keys and one argument less
	// than Fair, and does not read the queue.
	FairFirst TokenMode = "fairfirst"
)

// QueueFound is Acquire's n when a FairFirst attempt found a queue.
const QueueFound = -3

// Acquire makes one attempt to take the lock, without queueing. When
// granted, n is the token; otherwise n is the holder's remaining PTTL in
// ms (-1 if it has none, -2 if the lock is free but a waiter is first in
// line: Fair), or QueueFound (FairFirst). wake says how a Fair attempt that
// finds the lock free and a waiter first wakes it.
func (k *Keys) Acquire(ctx context.Context, rdb redis.Scripter, owner string, ttl time.Duration, holder []byte, mode TokenMode, wake Wake) (granted bool, n int64, err error) {
	var cmd *redis.Cmd
	switch tail := k.tail(holder); mode {
	case Incr: // the default: no mode argument, and two keys, the lock and the fence
		cmd = acquire.run(ctx, rdb, []*string{&k.Lock, &k.Fence}, owner, msArg(ttl), tail)
	case FairFirst: // no mode argument either, and the queue as a third key
		cmd = acquire.run(ctx, rdb, []*string{&k.Lock, &k.Fence, &k.Queue}, owner, msArg(ttl), tail)
	default:
		cmd = acquire.run(ctx, rdb, k.queueKeyPtrs(), owner, msArg(ttl), tail, mode.arg(), wake.arg())
	}
	n, err = cmd.Int64()
	if err != nil {
		return false, 0, err
	}
	if n > 0 {
		return true, n, nil
	}
	return false, -3 - n, nil
}

// RoundOne is a node's answer to AcquireRead.
type RoundOne struct {
	Granted bool
	PTTL    int64  // when not granted: the holder's remaining PTTL in ms (-1 if it has none)
	Counter int64  // the node's fence counter for the lock
	State   string // the value of the node's fence-state key ("" if absent)
	Slot    int    // AcquireSlot, when granted: the slot taken
}

// AcquireRead is Redlock's first round on one node: take the lock if it
// is free, storing token 0 (SetToken stores the token decided across the
// nodes), and report, read in the same step, the node's fence counter and
// the value of stateKey, which says whether the node's counters can be
// trusted (see package redlock).
func (k *Keys) AcquireRead(ctx context.Context, rdb redis.Scripter, owner string, ttl time.Duration, holder []byte, stateKey string) (RoundOne, error) {
	v, err := acquire.Run(ctx, rdb, []string{k.Lock, k.Fence, stateKey}, owner, ms(ttl), k.tail(holder), "read").Slice()
	if err != nil {
		return RoundOne{}, err
	}
	if len(v) != 4 {
		return RoundOne{}, fmt.Errorf("unexpected script reply %v", v)
	}
	granted, _ := v[0].(int64)
	r := RoundOne{Granted: granted == 1}
	r.PTTL, _ = v[1].(int64)
	r.Counter, _ = v[2].(int64)
	r.State, _ = v[3].(string)
	return r, nil
}

// tail is what follows the token in a lock value: " <len(name)> <name><holder>"
// (see value.lua).
func (k *Keys) tail(holder []byte) []byte {
	b := make([]byte, 0, len(k.Name)+len(holder)+8)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(k.Name)), 10)
	b = append(b, ' ')
	b = append(b, k.Name...)
	return append(b, holder...)
}

// Outcome of a fair attempt.
const (
	NotGranted = 0
	Granted    = 1 // granted by this attempt
	HandedOff  = 2 // granted earlier, by a release that handed the lock over
)

// Wake says how a release (or Break, or a waiter leaving) wakes the next
// waiter; see wake_next in queue.lua.
type Wake string

const (
	// HandOff: the release grants the lock to the first live waiter and
	// publishes the token on that waiter's process channel.
	HandOff Wake = "handoff"
	// WakeFirst: the release publishes the first waiter's owner key on the
	// lock's channel, and that waiter tries (Redis Cluster).
	WakeFirst Wake = "first"
	// WakeAny: the release publishes "" on the lock's channel, waking
	// whoever listens (waiters that retry rather than queue: Redlock's).
	WakeAny Wake = "any"
)

// FairAcquire makes one attempt of a queued acquire: when not granted, it
// queues the owner, or renews its place in the queue. waiterTTL
// is how long the place lasts without another attempt. With barge, a free
// lock is taken even if others are queued. proc is the waiter's process
// channel for hand-offs ("" if releases do not hand off), wake how a
// release that this attempt makes wakes the next waiter. When granted
// (Granted or HandedOff), n is the token; otherwise the holder's PTTL in
// ms, or -2 (none to wait for: look again at the heartbeat) for a new
// waiter queued behind others.
func (k *Keys) FairAcquire(ctx context.Context, rdb redis.Scripter, owner string, ttl time.Duration, holder []byte, waiterTTL time.Duration, proc string, wake Wake, barge bool) (outcome int, n int64, err error) {
	v, err := fairAcquire.run(ctx, rdb, k.queueKeyPtrs(),
		owner, msArg(ttl), k.Name, holder, msArg(waiterTTL), cmp.Or(proc, "-"), wake.arg(), flag(barge)).Slice()
	if err != nil {
		return 0, 0, err
	}
	if len(v) != 2 {
		return 0, 0, fmt.Errorf("unexpected script reply %v", v)
	}
	o, _ := v[0].(int64)
	n, _ = v[1].(int64)
	return int(o), n, nil
}

// queueKeys are the keys the scripts take, in their KEYS order: lock,
// fence, queue, waiters, channel.
func (k *Keys) queueKeys() []string {
	return []string{k.Lock, k.Fence, k.Queue, k.Waiters, k.Channel}
}

// queueKeyPtrs are queueKeys, as run takes them.
func (k *Keys) queueKeyPtrs() []*string {
	return []*string{&k.Lock, &k.Fence, &k.Queue, &k.Waiters, &k.Channel}
}

func flag(b bool) any {
	if b {
		return "1"
	}
	return "0"
}

// LeaveQueue removes a fair waiter that gives up, and passes on a lock
// handed to it meanwhile; the next waiter is served if the lock is free.
func (k *Keys) LeaveQueue(ctx context.Context, rdb redis.Scripter, owner string, wake Wake) error {
	return leaveQueue.run(ctx, rdb, k.queueKeyPtrs(), owner, k.Name, wake.arg()).Err()
}

// Extend renews owner's lease for ttl; false means the lock is not owner's.
func (k *Keys) Extend(ctx context.Context, rdb redis.Scripter, owner string, ttl time.Duration) (bool, error) {
	n, err := extend.run(ctx, rdb, []*string{&k.Lock}, owner, msArg(ttl)).Int64()
	return n == 1, err
}

// ExtendMany is Extend for many locks in one pipeline: one round trip
// (one per node of a cluster) for all. held[i] reports whether keys[i]
// was still owners[i]'s, and was renewed for ttls[i]; errs[i] why its
// renewal could not be settled. The renewals that found the server
// without the script (NOSCRIPT: not loaded yet, or flushed) are sent
// again with the script itself (EVAL), in a second pipeline.
func ExtendMany(ctx context.Context, rdb redis.UniversalClient, keys []*Keys, owners []string, ttls []time.Duration) (held []bool, errs []error) {
	held, errs = make([]bool, len(keys)), make([]error, len(keys))
	send := func(idx []int, run func(redis.Pipeliner, int) *redis.Cmd) (noScript []int) {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(idx))
		for k, i := range idx {
			cmds[k] = run(pipe, i)
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		for k, c := range cmds {
			n, err := c.Int64()
			if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
				noScript = append(noScript, idx[k])
			}
			held[idx[k]], errs[idx[k]] = n == 1, err
		}
		return noScript
	}
	all := make([]int, len(keys))
	for i := range all {
		all[i] = i
	}
	noScript := send(all, func(p redis.Pipeliner, i int) *redis.Cmd {
		return p.EvalSha(ctx, extend.sha, []string{keys[i].Lock}, owners[i], msArg(ttls[i]))
	})
	if len(noScript) > 0 {
		send(noScript, func(p redis.Pipeliner, i int) *redis.Cmd {
			return p.Eval(ctx, extend.src, []string{keys[i].Lock}, owners[i], msArg(ttls[i]))
		})
	}
	return held, errs
}

// HeldBy reads the lock, with a plain GET (no script), and reports whether
// it holds owner's grant with token: the check a waiter makes of a
// hand-off it learnt from a message (see fair.go in redislock).
func (k *Keys) HeldBy(ctx context.Context, rdb redis.Cmdable, owner string, token uint64) (bool, error) {
	v, err := rdb.Get(ctx, k.Lock).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return holds(v, owner, token), nil
}

// holds reports whether lock value v is owner's grant with token: it
// begins "<owner><sep><token> " or, made by a hand-off,
// "<owner><sep><token>/" (see value.lua), sep " " or "+".
func holds(v, owner string, token uint64) bool {
	if len(v) <= len(owner) || v[:len(owner)] != owner || (v[len(owner)] != ' ' && v[len(owner)] != '+') {
		return false
	}
	var buf [24]byte
	t := strconv.AppendUint(buf[:0], token, 10)
	rest := v[len(owner)+1:]
	return len(rest) > len(t) && rest[:len(t)] == string(t) && (rest[len(t)] == ' ' || rest[len(t)] == '/')
}

// Release frees owner's lock and serves the next waiter; false means the
// lock is not owner's.
func (k *Keys) Release(ctx context.Context, rdb redis.Scripter, owner string, wake Wake) (bool, error) {
	n, err := release.run(ctx, rdb, k.queueKeyPtrs(), owner, wake.arg()).Int64()
	return n == 1, err
}

// Break frees the lock whoever holds it — its writer, or every reader of
// a read-write lock — and serves the next waiter; false means it was free.
func (k *Keys) Break(ctx context.Context, rdb redis.Scripter, wake Wake) (bool, error) {
	keys := k.queueKeys()
	if k.Permits != "" {
		keys = append(keys, k.Permits, k.Holders)
	}
	n, err := breakLock.Run(ctx, rdb, keys, k.Name, wake.arg()).Int64()
	return n == 1, err
}

// SetToken raises the fence counter to token, and stores token in owner's
// lock; false means the lock is not owner's (the counter is raised all the
// same).
func (k *Keys) SetToken(ctx context.Context, rdb redis.Scripter, owner string, token uint64) (bool, error) {
	n, err := setToken.Run(ctx, rdb, k.queueKeys()[:2], owner, token).Int64()
	return n == 1, err
}

// Readers is the owner of the readers' mark: the lock key's value while
// readers of a read-write lock hold it (READERS in value.lua).
const Readers = "readers"

// Value is a decoded lock value.
type Value struct {
	Owner  string
	Token  uint64
	Name   string
	Holder []byte
}

var errBadValue = errors.New("not a dlock lock value")

// ParseValue decodes a lock value written by the scripts.
func ParseValue(s string) (Value, error) {
	sep := strings.IndexAny(s, " +") // "+": a waiter queued behind (value.lua)
	if sep < 0 {
		return Value{}, errBadValue
	}
	owner, rest := s[:sep], s[sep+1:]
	tok, rest, ok2 := strings.Cut(rest, " ")
	tok, _, _ = strings.Cut(tok, "/") // "/<last>" after a hand-off's token (value.lua)
	nlen, rest, ok3 := strings.Cut(rest, " ")
	n, err1 := strconv.Atoi(nlen)
	t, err2 := strconv.ParseUint(tok, 10, 64)
	if !ok2 || !ok3 || err1 != nil || err2 != nil || n < 0 || n > len(rest) {
		return Value{}, errBadValue
	}
	v := Value{Owner: owner, Token: t, Name: rest[:n]}
	if len(rest) > n {
		v.Holder = []byte(rest[n:])
	}
	return v, nil
}

// State is a lock as Inspect sees it on one node.
type State struct {
	Held    bool
	Value   Value
	PTTL    time.Duration
	Waiters [][]byte // live fair waiters' holder metadata, in queue order
	Name    string   // from the lock or a waiter's entry; "" if neither exists
	// Foreign: the lock is held by another library's lock (SetNX layout);
	// Value.Owner is then that lock's value, the rest of Value empty.
	Foreign bool
	// Permits are a semaphore's live permits, or a read-write lock's
	// readers, in grant order.
	Permits []Permit
	// Readers: the lock key holds the readers' mark (readers of a
	// read-write lock hold it, listed in Permits); Held is then false, as
	// no writer holds it.
	Readers bool
}

// Read reports the state of the lock, in one round trip, and one more for
// the waiters' entries if any are queued.
func (k *Keys) Read(ctx context.Context, rdb redis.Cmdable) (State, error) {
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	var queue *redis.StringSliceCmd
	var now *redis.TimeCmd
	var permits *redis.ZSliceCmd
	var holders *redis.MapStringStringCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, k.Lock)
		pttl = p.PTTL(ctx, k.Lock)
		queue = p.LRange(ctx, k.Queue, 0, -1)
		now = p.Time(ctx)
		if k.Permits != "" {
			// A semaphore's permits, in the same round trip: Inspect does
			// not know which of the two the name is.
			permits = p.ZRangeWithScores(ctx, k.Permits, 0, -1)
			holders = p.HGetAll(ctx, k.Holders)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return State{}, err
	}
	var st State
	if v, err := get.Result(); err == nil {
		st.Value, err = ParseValue(v)
		if err != nil {
			return State{}, fmt.Errorf("key %s: %w", k.Lock, err)
		}
		st.Held, st.Name = true, st.Value.Name
		st.PTTL = max(pttl.Val(), 0)
		if st.Value.Owner == Readers {
			st.Held, st.Readers, st.Value = false, true, Value{Name: st.Value.Name}
		}
	}
	nowMS := now.Val().UnixMilli()
	if permits != nil {
		h := holders.Val()
		if st.Permits = parsePermits(permits.Val(), h, nowMS); len(st.Permits) > 0 && st.Name == "" {
			st.Name = h[""]
		}
	}
	if owners := queue.Val(); len(owners) > 0 {
		keys := make([]string, len(owners))
		for i, o := range owners {
			keys[i] = k.Waiters + o
		}
		entries, err := rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return State{}, err
		}
		for _, e := range entries {
			// A live waiter's entry (see queue.lua); a dead one's has expired.
			s, _ := e.(string)
			if name, holder, ok := parseEntry(s); ok {
				st.Waiters = append(st.Waiters, []byte(holder))
				if st.Name == "" {
					st.Name = name
				}
			}
		}
	}
	return st, nil
}

// parseEntry reads the name and the holder metadata of a waiter's entry,
// "<ttl ms> <process channel> <len(name)> <name><holder>".
func parseEntry(e string) (name, holder string, ok bool) {
	f := strings.SplitN(e, " ", 4)
	if len(f) < 4 {
		return "", "", false
	}
	n, err := strconv.Atoi(f[2])
	if err != nil || n < 0 || n > len(f[3]) {
		return "", "", false
	}
	return f[3][:n], f[3][n:], true
}

// ScanNames returns the names of the locks under prefix that are held or
// have a queue, by SCAN over every master (names are hashed into the keys,
// so a name prefix cannot narrow the scan).
func ScanNames(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]string, error) {
	return scanNames(ctx, rdb, prefix, "lock", "queue")
}

// ScanNamesAndSemaphores is ScanNames that also finds the semaphores
// with a permit held (their permits keys; see permits.lua).
func ScanNamesAndSemaphores(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]string, error) {
	return scanNames(ctx, rdb, prefix, "lock", "queue", "permits")
}

// scanNames returns the names found by the keys with the given suffixes:
// "lock" (the name is in the value), "queue" (in its waiters' entries),
// "permits" (in the holders hash).
func scanNames(ctx context.Context, rdb redis.UniversalClient, prefix string, suffixes ...string) ([]string, error) {
	var mu sync.Mutex
	seen := map[string]bool{}
	var names []string
	scan := func(ctx context.Context, c *redis.Client) error {
		for _, suffix := range suffixes {
			it := c.Scan(ctx, 0, prefix+":{*}:"+suffix, 1000).Iterator()
			for it.Next(ctx) {
				key := it.Val()
				base := strings.TrimSuffix(key, suffix)
				k := Keys{Lock: base + "lock", Queue: key, Waiters: base + "waiter:", Holders: base + "holders"}
				var name string
				switch suffix {
				case "permits":
					name, _ = c.HGet(ctx, k.Holders, "").Result()
				case "lock":
					v, err := c.Get(ctx, k.Lock).Result()
					if err != nil {
						continue // expired meanwhile
					}
					pv, err := ParseValue(v)
					if err != nil {
						continue
					}
					name = pv.Name
				default:
					name = queueName(ctx, c, &k)
				}
				mu.Lock()
				if name != "" && !seen[name] {
					seen[name] = true
					names = append(names, name)
				}
				mu.Unlock()
			}
			if err := it.Err(); err != nil {
				return err
			}
		}
		return nil
	}
	err := EachMaster(ctx, rdb, scan)
	return names, err
}

// queueName is the name of a queue's lock, from the first of its waiters'
// entries that has not expired ("" if none).
func queueName(ctx context.Context, c *redis.Client, k *Keys) string {
	owners, err := c.LRange(ctx, k.Queue, 0, -1).Result()
	if err != nil {
		return ""
	}
	for _, o := range owners {
		if e, err := c.Get(ctx, k.Waiters+o).Result(); err == nil {
			if name, _, ok := parseEntry(e); ok {
				return name
			}
		}
	}
	return ""
}

// EachMaster calls fn on the server of a *redis.Client, or on every master
// of a *redis.ClusterClient in parallel; other clients are an error.
func EachMaster(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("needs a *redis.Client or *redis.ClusterClient, not %T", rdb)
}
