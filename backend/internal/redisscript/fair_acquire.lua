-- fair_acquire.lua: one attempt of a queued acquire, in one round trip.
-- The lock is granted only to the first live waiter of the queue (or to
-- anyone when nobody waits) — except to a barging attempt (a plain Lock's
-- first), which takes a free lock whoever waits. A waiter that is not
-- granted joins the queue, or, when already in it, renews its entry: the
-- same call is its heartbeat. A release may meanwhile have handed the lock
-- to this owner (see wake_next); then the attempt reports that.
--
-- KEYS[1] lock  KEYS[2] fence  KEYS[3] queue  KEYS[4] waiters (the entry keys' prefix)
-- KEYS[5] channel
-- ARGV[1] owner  ARGV[2] TTL in ms  ARGV[3] name  ARGV[4] holder metadata
-- ARGV[5] how long a waiter's entry lives without a heartbeat, in ms
-- ARGV[6] the waiter's process channel, for hand-offs ("-": none)
-- ARGV[7] how a release wakes the next waiter (see wake_next)
-- ARGV[8] "1" to take a free lock even if others are queued
-- Returns {1, token} when granted now, {2, token} when it had been handed
-- to this owner, {0, pttl} when not granted (the lock's PTTL in ms, or -2
-- for a new waiter queued behind others, see below).
--@queue
local lock, fence, queue, waiters, channel = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, ttl, name, holder = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local v = redis.call('GET', lock)
if owned_by(v, owner) then
  return {2, tonumber(string.match(v, '^[^ +]+[ +](%d+)'))}
end
if not v then
  -- Free: who is first in line decides. (While the lock is held the queue
  -- needs no look: a release serves its head.)
  local head = live_head(queue, waiters, owner)
  if not head or head == owner or ARGV[8] == '1' then
    -- A waiter granted from the head leaves the queue; its entry expires
    -- on its own (see queue.lua).
    if head == owner then redis.call('LPOP', queue) end
    local token = redis.call('INCR', fence)
    -- Marked if anyone was queued: others may still be behind.
    redis.call('SET', lock, lock_value(owner, token, tail_of(name, holder), head), 'PX', ttl)
    return {1, token}
  end
  -- Free, but another live waiter is first: it gets the lock, or its
  -- wake-up, now.
  -- A hand-off skips the waiters whose process has gone, and may thus
  -- reach this caller: it is granted, and must not queue again (its
  -- release would hand the lock to its own owner key, which nobody waits
  -- for any more). The message published to its process is then unused.
  local to, token = wake_next(lock, fence, queue, waiters, channel, ARGV[7], false)
  if to == owner then
    return {1, token}
  end
else
  -- Held: mark it, if nobody queued behind it yet, so that its release
  -- serves the queue.
  mark_queued(lock, v)
end
-- The lock's PTTL tells a waiter when the lease would run out, which no
-- message announces: the first in line takes the lock then. A new waiter
-- behind others is handed the lock in turn and gets -2 ("look again at
-- the heartbeat"); should the lock still be held by then, with the
-- waiters ahead of it gone, its heartbeat, which always reads the PTTL,
-- finds it at the head of the queue.
local pttl = -2
if enqueue(queue, waiters, owner, ttl .. ' ' .. ARGV[6] .. tail_of(name, holder), ARGV[5]) then
  pttl = redis.call('PTTL', lock)
end
return {0, pttl}
