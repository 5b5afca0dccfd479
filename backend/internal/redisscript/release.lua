-- release.lua: free the lock if it still belongs to the owner, and wake
-- the next waiter.
--
-- KEYS[1] lock  KEYS[2] queue  KEYS[3] waiters  KEYS[4] channel
-- ARGV[1] owner
-- Returns 1 when released, 0 when the lock is not the owner's.
if not owned_by(redis.call('GET', KEYS[1]), ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
wake_next(KEYS[2], KEYS[3], KEYS[4])
return 1
