-- slot_extend.lua: renew a Redlock permit on one node if the owner still
-- holds its slot there (see slots.lua).
--
-- KEYS[1] permits  KEYS[2] holders
-- ARGV[1] owner  ARGV[2] TTL in ms  ARGV[3] slot
-- Returns 1 when renewed, 0 when the owner does not hold the slot here.
--@queue
--@permits
--@slots
local now = now_ms()
if not holds(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[3]), now) then return 0 end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
keep_until(KEYS[1], KEYS[2], now)
return 1
