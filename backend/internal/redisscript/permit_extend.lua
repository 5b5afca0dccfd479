-- permit_extend.lua: renew a semaphore permit if it is still the owner's
-- and has not expired (see permits.lua).
--
-- KEYS[1] permits  KEYS[2] holders
-- ARGV[1] owner  ARGV[2] TTL in ms
-- Returns 1 when renewed, 0 when the permit is not the owner's any more.
--@queue
--@permits
local now = now_ms()
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) <= now then return 0 end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
keep_until(KEYS[1], KEYS[2], now)
return 1
