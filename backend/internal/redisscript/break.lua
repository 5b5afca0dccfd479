-- break.lua: free the lock whoever holds it, and wake the next waiter. The
-- fence counter is left alone, so the next grant's token is higher.
--
-- KEYS[1] lock  KEYS[2] queue  KEYS[3] waiters  KEYS[4] channel
-- Returns 1 when a lock was freed, 0 when it was free.
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
wake_next(KEYS[2], KEYS[3], KEYS[4])
return 1
