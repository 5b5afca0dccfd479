-- slot_release.lua: give back the owner's permit on one node, whichever
-- slot it holds there (an attempt that is given up may have been granted
-- another slot on some nodes), and wake the waiters: every one listening
-- on the name's channel tries again.
--
-- KEYS[1] permits  KEYS[2] holders  KEYS[3] channel
-- ARGV[1] owner  ARGV[2] slot
-- Returns 1 when the owner held that slot here, 0 otherwise.
--@queue
--@permits
--@slots
local now = now_ms()
local held = holds(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), now)
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
prune(KEYS[1], KEYS[2], now)
if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[2]) end
redis.call('PUBLISH', KEYS[3], '')
if held then return 1 end
return 0
