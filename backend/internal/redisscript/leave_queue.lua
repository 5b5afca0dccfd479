-- leave_queue.lua: a waiter gives up (its context ended). If it was first
-- in line and the lock is free, the next live waiter is woken, since no
-- release will come to wake it.
--
-- KEYS[1] lock  KEYS[2] queue  KEYS[3] waiters  KEYS[4] channel
-- ARGV[1] owner
local removed = redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if redis.call('LLEN', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[3])
elseif removed > 0 and redis.call('EXISTS', KEYS[1]) == 0 then
  wake_next(KEYS[2], KEYS[3], KEYS[4])
end
return removed
