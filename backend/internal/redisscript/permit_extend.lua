-- permit_extend.lua: renew a semaphore permit, or a reader's lease, if it
-- is still the owner's and has not expired (see permits.lua).
--
-- KEYS[1] permits  KEYS[2] holders  KEYS[3] lock: a reader's only
-- ARGV[1] owner  ARGV[2] TTL in ms
-- Returns 1 when renewed, 0 when the permit is not the owner's any more.
--@queue
--@permits
local now = now_ms()
-- A reader's lease is valid only under the readers' mark.
if KEYS[3] and not owned_by(redis.call('GET', KEYS[3]), READERS) then return 0 end
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) <= now then return 0 end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
keep_until(KEYS[1], KEYS[2], now, KEYS[3])
return 1
