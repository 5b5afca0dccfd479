-- acquire.lua: take the lock if it is free, in one round trip, without
-- queueing: SET NX PX with the fencing token in the value.
--
-- KEYS[1] lock  KEYS[2] fence counter (no TTL: it must outlive every lock)
-- KEYS[3] queue  KEYS[4] waiters (the entry keys' prefix)  KEYS[5] channel
-- (mode "fair" only: the other modes pass two keys, or three (see below),
-- as every argument costs time on both sides)
-- ARGV[1] owner  ARGV[2] TTL in ms  ARGV[3] the value's tail (see value.lua)
-- ARGV[4] absent: the token is the next value of the fence counter (Redis);
--         with KEYS[3], the queue, as well: the same, but only if nobody
--         is queued; otherwise 0 is returned, and the caller (a fair
--         Lock's first attempt) queues with fair_acquire.lua, which looks
--         at who is queued, as mode "fair" does here;
--         "fair": the same, but only if no live waiter is queued;
--         "read": store token 0 and report the counter, for Redlock, whose
--         token is decided across nodes and stored by set_token.lua;
--         KEYS[3] is then the node's fence-state key (see package redlock),
--         read in the same step as the counter.
-- ARGV[5] mode "fair": how the first waiter is woken if the lock is free
--         and a waiter is first in line (see wake_next)
-- Returns, in "read" mode, {granted (1 or 0), pttl (0 when granted),
-- counter, fence state ("" if none)}; in the others, as one integer (cheaper to make and to read than a
-- table), the token (> 0) when granted and -3 - pttl (< 0) when not (or
-- 0, see above).
local mode = ARGV[4]
if mode == 'read' then
  local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
  local state = redis.call('GET', KEYS[3]) or ''
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl ~= -2 then return {0, pttl, counter, state} end
  redis.call('SET', KEYS[1], lock_value(ARGV[1], 0, ARGV[3]), 'PX', ARGV[2])
  -- The fence key exists from the first round on, so that a seeding that
  -- runs before the second finds this lock by it (a compat=setnx lock key,
  -- the name itself, cannot be found by a pattern).
  if counter == 0 then redis.call('SET', KEYS[2], 0, 'NX') end
  return {1, 0, counter, state}
end
local first = mode == 'fair' and redis.call('LINDEX', KEYS[3], 0)
if first then
  --@queue
  if live_head(KEYS[3], KEYS[4], nil, first) then
    -- Someone is first in line. If the lock is free (PTTL -2: no key), it
    -- gets the lock, or its wake-up, now.
    local pttl = redis.call('PTTL', KEYS[1])
    if pttl ~= -2 then return -3 - pttl end
    wake_next(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[5], false)
    return -3 - redis.call('PTTL', KEYS[1])
  end
end
if not mode and KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 then
  return 0
end
-- The token is taken first, so that SET NX decides in one call; an
-- attempt that finds the lock held uses up a number, which is harmless:
-- tokens need only increase.
local token = redis.call('INCR', KEYS[2])
if redis.call('SET', KEYS[1], lock_value(ARGV[1], token, ARGV[3]), 'NX', 'PX', ARGV[2]) then
  return token
end
return -3 - redis.call('PTTL', KEYS[1])
