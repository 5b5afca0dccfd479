-- permit_release.lua: give back a semaphore permit, or a reader's lease,
-- if it is still the owner's and has not expired, and wake the first
-- waiter if it may now be granted (see permits.lua). The last reader's
-- release deletes the readers' mark, so a writer waiting first in line
-- is woken, and takes the lock key.
--
-- KEYS[1] permits  KEYS[2] holders  KEYS[3] queue  KEYS[4] waiters
-- KEYS[5] channel  KEYS[6] lock: a reader's only
-- ARGV[1] owner
-- Returns 1 when released, 0 when the permit is not the owner's any more.
--@queue
--@permits
local lock = KEYS[6]
local now = now_ms()
if lock and not owned_by(redis.call('GET', lock), READERS) then return 0 end
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) <= now then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
prune(KEYS[1], KEYS[2], now)
local held = redis.call('ZCARD', KEYS[1])
if held == 0 then
  redis.call('DEL', KEYS[2])
  if lock then redis.call('DEL', lock) end
else
  -- The mark lasts no longer than the readers left.
  keep_until(KEYS[1], KEYS[2], now, lock)
end
wake_head(KEYS[3], KEYS[4], KEYS[5], held)
return 1
