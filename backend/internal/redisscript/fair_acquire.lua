-- fair_acquire.lua: one attempt of a fair (FIFO) acquire, in one round
-- trip. The lock is granted only to the first live waiter of the queue (or
-- to anyone when nobody waits). A waiter that is not granted joins the
-- queue, or, when already in it, renews its entry: the same call is its
-- heartbeat.
--
-- KEYS[1] lock  KEYS[2] fence  KEYS[3] queue  KEYS[4] waiters  KEYS[5] channel
-- ARGV[1] owner  ARGV[2] TTL in ms  ARGV[3] name  ARGV[4] holder metadata
-- ARGV[5] "1" to queue when not granted, "0" for a single try
-- ARGV[6] how long a waiter's entry lives without a heartbeat, in ms
-- Returns {1, token} when granted, {0, pttl} when not.
local lock, fence, queue, waiters, channel = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner = ARGV[1]
local head = live_head(queue, waiters)
local pttl = redis.call('PTTL', lock)
if pttl == -2 then
  if not head or head == owner then
    if head then
      redis.call('LPOP', queue)
      redis.call('HDEL', waiters, owner)
    end
    local token = redis.call('INCR', fence)
    redis.call('SET', lock, lock_value(owner, token, ARGV[3], ARGV[4]), 'PX', ARGV[2])
    return {1, token}
  end
  -- Free, but another live waiter is first: make sure it knows.
  redis.call('PUBLISH', channel, head)
end
if ARGV[5] == '1' then
  local wttl = tonumber(ARGV[6])
  if redis.call('HSET', waiters, owner, (now_ms() + wttl) .. ' ' .. ARGV[4]) == 1 then
    redis.call('RPUSH', queue, owner)
    redis.call('HSET', waiters, '', ARGV[3]) -- the name, for List
  end
  -- The queue vanishes a heartbeat period after its last live waiter.
  redis.call('PEXPIRE', queue, wttl)
  redis.call('PEXPIRE', waiters, wttl)
end
return {0, pttl}
