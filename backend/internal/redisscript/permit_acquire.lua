-- permit_acquire.lua: one attempt at a permit of a semaphore, or at a
-- reader's lease of a read-write lock, in one round trip (see
-- permits.lua). A permit is granted while fewer than the caller's limit
-- are held, a reader's lease while no writer holds the lock key; and,
-- unless the attempt barges, only if no live waiter is queued before the
-- caller. The token is the next value of the name's fence counter, the
-- one the mutex uses, so that tokens of one name increase in grant order
-- whichever permit a grant takes, and across readers and writers. An
-- attempt that may queue and is not granted joins the queue, or renews its
-- place there: the attempt is the waiter's heartbeat.
--
-- KEYS[1] permits  KEYS[2] holders  KEYS[3] fence  KEYS[4] queue
-- KEYS[5] waiters (the entry keys' prefix, see queue.lua)  KEYS[6] channel  KEYS[7] lock: a reader's attempt only
-- ARGV[1] owner  ARGV[2] TTL in ms  ARGV[3] limit (unused by a reader)
-- ARGV[4] name  ARGV[5] holder metadata
-- ARGV[6] "1" to take a free permit even if others are queued
-- ARGV[7] how long a waiter's place lives without a heartbeat, in ms; "0"
--         for an attempt that does not queue
-- Returns {1, token} when granted, {0, ms} when not: ms is the time left on
-- the permit that expires first, or on a writer's lease (-1 if none is
-- held), when the caller should look again if no message came.
--@queue
--@permits
local permits, holders, fence, queue, waiters, channel, lock = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local owner, ttl, limit, name, holder = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local now = now_ms()
local writer = lock and writer_of(lock, permits, holders)
prune(permits, holders, now)
local held = redis.call('ZCARD', permits)
if (lock and not writer) or (not lock and held < limit) then
  local head = live_head(queue, waiters, owner)
  if not head or head == owner or ARGV[6] == '1' then
    -- A waiter granted from the head leaves the queue; its entry expires
    -- on its own (see queue.lua).
    if head == owner then redis.call('LPOP', queue) end
    local token = redis.call('INCR', fence)
    redis.call('ZADD', permits, now + ttl, owner)
    redis.call('HSET', holders, owner, string.format('%d', token) .. ' ' .. holder, '', name)
    keep_until(permits, holders, now, lock, name)
    -- Another permit may be left for the next in line (or the next is a
    -- reader, who may join): no release will come to wake it.
    if head then wake_head(queue, waiters, channel, held + 1) end
    return {1, token}
  end
  -- A permit is free, but another live waiter is first: wake it.
  wake_head(queue, waiters, channel, held)
end
local wttl = tonumber(ARGV[7])
if wttl > 0 then
  -- A reader queued behind a writer's grant needs its release to serve
  -- the queue.
  if writer then mark_queued(lock, writer) end
  enqueue(queue, waiters, owner, ARGV[2] .. ' -' .. tail_of(name, holder), wttl)
end
if writer then return {0, redis.call('PTTL', lock)} end
local first = redis.call('ZRANGE', permits, 0, 0, 'WITHSCORES')
if first[2] then return {0, tonumber(first[2]) - now} end
return {0, -1}
