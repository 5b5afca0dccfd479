-- slot_break.lua: free every permit of a Redlock semaphore on one node,
-- whoever holds them, and wake the waiters. The fence counter is left
-- alone, so the next grant's token is higher.
--
-- KEYS[1] permits  KEYS[2] holders  KEYS[3] channel
-- Returns 1 when permits were freed, 0 when none was held.
--@queue
--@permits
prune(KEYS[1], KEYS[2], now_ms())
if redis.call('ZCARD', KEYS[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('PUBLISH', KEYS[3], '')
return 1
