-- permit_leave_queue.lua: a semaphore waiter gives up (its context ended,
-- or an attempt failed). It leaves the queue, gives back a permit that an
-- attempt of its own granted without its learning it (the reply was
-- lost), and, as no release will come to do it, wakes the waiter now
-- first if it may be granted a permit.
--
-- KEYS[1] permits  KEYS[2] holders  KEYS[3] queue  KEYS[4] waiters
-- KEYS[5] channel
-- ARGV[1] owner
-- Returns how many places it left (0 or 1).
--@queue
--@permits
local removed = redis.call('LREM', KEYS[3], 0, ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
local returned = redis.call('ZREM', KEYS[1], ARGV[1])
if returned > 0 then redis.call('HDEL', KEYS[2], ARGV[1]) end
if redis.call('LLEN', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[4])
elseif removed > 0 or returned > 0 then
  prune(KEYS[1], KEYS[2], now_ms())
  wake_head(KEYS[3], KEYS[4], KEYS[5], redis.call('ZCARD', KEYS[1]))
end
if returned > 0 and redis.call('ZCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[2]) end
return removed
