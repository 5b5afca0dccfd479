package redisscript

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A semaphore (Request.Limit > 1) keeps its permits in keys of its own
// beside the mutex's, under the same hash tag, and queues its waiters in
// the mutex's queue; see permits.lua. The mutex's scripts never touch
// them. The readers of a read-write lock (Request.Shared) are permits
// too, whose scripts also take the lock key, where they keep the readers'
// mark (see permits.lua): a writer is a mutex.

var (
	//go:embed permits.lua
	permitsLib string
	//go:embed permit_acquire.lua
	permitAcquireSrc string
	//go:embed permit_extend.lua
	permitExtendSrc string
	//go:embed permit_release.lua
	permitReleaseSrc string
	//go:embed permit_break.lua
	permitBreakSrc string
	//go:embed permit_leave_queue.lua
	permitLeaveQueueSrc string
)

const permitsMark = "--@permits\n"

func permitScript(src string) *luaScript {
	return script(strings.Replace(src, permitsMark, permitsLib, 1))
}

var (
	permitAcquire    = permitScript(permitAcquireSrc)
	permitExtend     = permitScript(permitExtendSrc)
	permitRelease    = permitScript(permitReleaseSrc)
	permitBreak      = permitScript(permitBreakSrc)
	permitLeaveQueue = permitScript(permitLeaveQueueSrc)
)

// permitKeys are the keys the semaphore scripts take, in their KEYS
// order: permits, holders, fence, queue, waiters, channel; and, for a
// reader, the lock key.
func (k *Keys) permitKeys(reader bool) []string {
	return readerKey([]string{k.Permits, k.Holders, k.Fence, k.Queue, k.Waiters, k.Channel}, k, reader)
}

// permitKeysNoFence are the keys of the scripts that grant nothing:
// permits, holders, queue, waiters, channel; and, for a reader, the lock
// key.
func (k *Keys) permitKeysNoFence(reader bool) []string {
	return readerKey([]string{k.Permits, k.Holders, k.Queue, k.Waiters, k.Channel}, k, reader)
}

// readerKey appends the lock key to a permit script's keys for a reader
// of a read-write lock: its presence is what tells the script so.
func readerKey(keys []string, k *Keys, reader bool) []string {
	if reader {
		return append(keys, k.Lock)
	}
	return keys
}

// AcquirePermit makes one attempt at a permit of a semaphore of limit
// permits, or, with reader, at a reader's lease of a read-write lock
// (limit is then unused). With barge, a free permit is taken even if others are queued.
// With a waiterTTL, an attempt that is not granted queues the owner (or
// renews its place) for that long; with 0 it leaves the queue alone. When
// granted, n is the token; otherwise the time in ms until the first
// permit held expires (-1 if none is held).
func (k *Keys) AcquirePermit(ctx context.Context, rdb redis.Scripter, owner string, ttl time.Duration, limit int, reader bool, holder []byte, barge bool, waiterTTL time.Duration) (granted bool, n int64, err error) {
	wttl := int64(0)
	if waiterTTL > 0 {
		wttl = ms(waiterTTL)
	}
	v, err := permitAcquire.Run(ctx, rdb, k.permitKeys(reader),
		owner, ms(ttl), limit, k.Name, holder, flag(barge), wttl).Slice()
	if err != nil {
		return false, 0, err
	}
	if len(v) != 2 {
		return false, 0, fmt.Errorf("unexpected script reply %v", v)
	}
	o, _ := v[0].(int64)
	n, _ = v[1].(int64)
	return o == 1, n, nil
}

// ExtendPermit renews owner's permit (a reader's lease, with reader) for
// ttl; false means it is not owner's any more.
func (k *Keys) ExtendPermit(ctx context.Context, rdb redis.Scripter, owner string, reader bool, ttl time.Duration) (bool, error) {
	n, err := permitExtend.Run(ctx, rdb, readerKey([]string{k.Permits, k.Holders}, k, reader), owner, ms(ttl)).Int64()
	return n == 1, err
}

// ReleasePermit gives back owner's permit (a reader's lease, with reader)
// and wakes the first waiter if it may be granted; false means the permit
// is not owner's any more.
func (k *Keys) ReleasePermit(ctx context.Context, rdb redis.Scripter, owner string, reader bool) (bool, error) {
	n, err := permitRelease.Run(ctx, rdb, k.permitKeysNoFence(reader), owner).Int64()
	return n == 1, err
}

// BreakPermits frees every permit of the semaphore; false means none was
// held.
func (k *Keys) BreakPermits(ctx context.Context, rdb redis.Scripter) (bool, error) {
	n, err := permitBreak.Run(ctx, rdb, k.permitKeysNoFence(false)).Int64()
	return n == 1, err
}

// LeavePermitQueue takes a semaphore's or a reader's waiter that gives up
// out of the queue, gives back a permit granted to it meanwhile, and wakes
// the next waiter if it may be granted one.
func (k *Keys) LeavePermitQueue(ctx context.Context, rdb redis.Scripter, owner string, reader bool) error {
	return permitLeaveQueue.Run(ctx, rdb, k.permitKeysNoFence(reader), owner).Err()
}

// Permit is one live permit of a semaphore, as Read sees it.
type Permit struct {
	Owner  string
	Token  uint64
	Holder []byte
	PTTL   time.Duration
}

// parsePermits decodes the permits set (owner and expiry, by ZRANGE
// WITHSCORES) and the holders hash into the permits still live at nowMS,
// in grant order (by token).
func parsePermits(zs []redis.Z, holders map[string]string, nowMS int64) []Permit {
	var out []Permit
	for _, z := range zs {
		owner, _ := z.Member.(string)
		left := int64(z.Score) - nowMS
		tok, holder, ok := strings.Cut(holders[owner], " ")
		t, err := strconv.ParseUint(tok, 10, 64)
		if left <= 0 || !ok || err != nil {
			continue // expired, not yet pruned
		}
		p := Permit{Owner: owner, Token: t, PTTL: time.Duration(left) * time.Millisecond}
		if holder != "" {
			p.Holder = []byte(holder)
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Permit) int { return cmp.Compare(a.Token, b.Token) })
	return out
}
