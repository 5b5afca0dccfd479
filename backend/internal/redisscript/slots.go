package redisscript

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redlock's semaphore (package redlock) holds each permit as one of n
// slots on a majority of the nodes, in the permits keys of permits.lua;
// see slots.lua.

var (
	//go:embed slots.lua
	slotsLib string
	//go:embed slot_acquire.lua
	slotAcquireSrc string
	//go:embed slot_token.lua
	slotTokenSrc string
	//go:embed slot_extend.lua
	slotExtendSrc string
	//go:embed slot_release.lua
	slotReleaseSrc string
	//go:embed slot_break.lua
	slotBreakSrc string
)

const slotsMark = "--@slots\n"

func slotScript(src string) *luaScript {
	return permitScript(strings.Replace(src, slotsMark, slotsLib, 1))
}

var (
	slotAcquire = slotScript(slotAcquireSrc)
	slotToken   = slotScript(slotTokenSrc)
	slotExtend  = slotScript(slotExtendSrc)
	slotRelease = slotScript(slotReleaseSrc)
	slotBreak   = slotScript(slotBreakSrc)
)

// AcquireSlot is Redlock's first round for a permit of a semaphore of
// limit permits on one node: take a free slot below limit (pref if it is
// free) if fewer than limit permits are held there, with token 0, and
// report the name's fence counter and the value of stateKey, read in the
// same step (as AcquireRead does for a mutex). When granted, Slot is the
// slot taken; otherwise PTTL is the time in ms left on the permit that
// expires first (-1 if none is held).
func (k *Keys) AcquireSlot(ctx context.Context, rdb redis.Scripter, owner string, ttl time.Duration, limit, pref int, holder []byte, stateKey string) (RoundOne, error) {
	v, err := slotAcquire.Run(ctx, rdb, []string{k.Permits, k.Holders, k.Fence, stateKey},
		owner, ms(ttl), limit, pref, k.Name, holder).Slice()
	if err != nil {
		return RoundOne{}, err
	}
	if len(v) != 4 {
		return RoundOne{}, fmt.Errorf("unexpected script reply %v", v)
	}
	granted, _ := v[0].(int64)
	n, _ := v[1].(int64)
	r := RoundOne{Granted: granted == 1}
	if r.Granted {
		r.Slot = int(n)
	} else {
		r.PTTL = n
	}
	r.Counter, _ = v[2].(int64)
	r.State, _ = v[3].(string)
	return r, nil
}

// SlotToken is Redlock's second round for a permit on one node: claim
// token for this grant if the fence counter is below it (raising the
// counter to it), and store it in owner's permit if owner holds slot.
// state is the value of stateKey, read in the same step.
func (k *Keys) SlotToken(ctx context.Context, rdb redis.Scripter, owner string, slot int, token uint64, stateKey string) (claimed, held bool, state string, err error) {
	v, err := slotToken.Run(ctx, rdb, []string{k.Permits, k.Holders, k.Fence, stateKey}, owner, token, slot).Slice()
	if err != nil {
		return false, false, "", err
	}
	if len(v) != 3 {
		return false, false, "", fmt.Errorf("unexpected script reply %v", v)
	}
	c, _ := v[0].(int64)
	h, _ := v[1].(int64)
	state, _ = v[2].(string)
	return c == 1, h == 1, state, nil
}

// ExtendSlot renews owner's permit for ttl if owner holds slot; false
// means it does not.
func (k *Keys) ExtendSlot(ctx context.Context, rdb redis.Scripter, owner string, slot int, ttl time.Duration) (bool, error) {
	n, err := slotExtend.Run(ctx, rdb, []string{k.Permits, k.Holders}, owner, ms(ttl), slot).Int64()
	return n == 1, err
}

// ReleaseSlot gives back owner's permit, whichever slot it holds, and
// wakes the waiters; false means owner did not hold slot (slot -1: an
// attempt given up, whose answer does not matter).
func (k *Keys) ReleaseSlot(ctx context.Context, rdb redis.Scripter, owner string, slot int) (bool, error) {
	n, err := slotRelease.Run(ctx, rdb, []string{k.Permits, k.Holders, k.Channel}, owner, slot).Int64()
	return n == 1, err
}

// BreakSlots frees every permit of a Redlock semaphore and wakes the
// waiters; false means none was held.
func (k *Keys) BreakSlots(ctx context.Context, rdb redis.Scripter) (bool, error) {
	n, err := slotBreak.Run(ctx, rdb, []string{k.Permits, k.Holders, k.Channel}).Int64()
	return n == 1, err
}

// SplitSlot splits the holder of a Redlock permit as Read reports it,
// "<slot> <holder>", into the slot and the holder metadata.
func SplitSlot(holder []byte) (slot int, rest []byte, ok bool) {
	s, r, found := strings.Cut(string(holder), " ")
	n, err := strconv.Atoi(s)
	if !found || err != nil {
		return 0, nil, false
	}
	if r != "" {
		rest = []byte(r)
	}
	return n, rest, true
}
