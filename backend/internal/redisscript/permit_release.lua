-- permit_release.lua: give back a semaphore permit if it is still the
-- owner's and has not expired, and wake the first waiter if it may now be
-- granted one (see permits.lua).
--
-- KEYS[1] permits  KEYS[2] holders  KEYS[3] queue  KEYS[4] waiters
-- KEYS[5] channel
-- ARGV[1] owner
-- Returns 1 when released, 0 when the permit is not the owner's any more.
--@queue
--@permits
local now = now_ms()
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) <= now then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
prune(KEYS[1], KEYS[2], now)
local held = redis.call('ZCARD', KEYS[1])
if held == 0 then redis.call('DEL', KEYS[2]) end
wake_head(KEYS[3], KEYS[4], KEYS[5], held)
return 1
