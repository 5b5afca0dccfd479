-- permit_leave_queue.lua: a semaphore's or a reader's waiter gives up (its
-- context ended, or an attempt failed). It leaves the queue, gives back a
-- permit that an attempt of its own granted without its learning it (the
-- reply was lost), and, as no release will come to do it, wakes the waiter
-- now first if it may be granted.
--
-- KEYS[1] permits  KEYS[2] holders  KEYS[3] queue  KEYS[4] waiters (the entry keys' prefix)
-- KEYS[5] channel  KEYS[6] lock: a reader's only
-- ARGV[1] owner
-- Returns how many places it left (0 or 1).
--@queue
--@permits
local lock = KEYS[6]
local removed = redis.call('LREM', KEYS[3], 0, ARGV[1])
redis.call('DEL', KEYS[4] .. ARGV[1])
local returned = redis.call('ZREM', KEYS[1], ARGV[1])
if returned > 0 then redis.call('HDEL', KEYS[2], ARGV[1]) end
-- A writer holds (and will serve the queue when it releases), or, for a
-- semaphore, there is no lock key to mind.
local writer = lock and writer_of(lock, KEYS[1], KEYS[2])
local held = -1
if (removed > 0 or returned > 0) and not writer then
  prune(KEYS[1], KEYS[2], now_ms())
  held = redis.call('ZCARD', KEYS[1])
  if returned > 0 and held == 0 then
    redis.call('DEL', KEYS[2])
    if lock then redis.call('DEL', lock) end
  elseif returned > 0 then
    keep_until(KEYS[1], KEYS[2], now_ms(), lock)
  end
end
if held >= 0 then
  wake_head(KEYS[3], KEYS[4], KEYS[5], held)
end
return removed
