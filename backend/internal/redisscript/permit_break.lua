-- permit_break.lua: free every permit of a semaphore whoever holds them,
-- and wake the first waiter. The fence counter is left alone, so the next
-- grant's token is higher.
--
-- KEYS[1] permits  KEYS[2] holders  KEYS[3] queue  KEYS[4] waiters
-- KEYS[5] channel
-- Returns 1 when permits were freed, 0 when none was held.
--@queue
--@permits
prune(KEYS[1], KEYS[2], now_ms())
if redis.call('ZCARD', KEYS[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
wake_head(KEYS[3], KEYS[4], KEYS[5], 0)
return 1
