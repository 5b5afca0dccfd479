-- break.lua: free the lock whoever holds it, and serve the next waiter.
-- The fence counter is left alone, so the next grant's token is higher.
--
-- KEYS[1] lock  KEYS[2] fence  KEYS[3] queue  KEYS[4] waiters  KEYS[5] channel
-- ARGV[1] name  ARGV[2] how the next waiter is woken (see wake_next)
-- Returns 1 when a lock was freed, 0 when it was free.
--@queue
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
wake_next(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[2], true)
return 1
