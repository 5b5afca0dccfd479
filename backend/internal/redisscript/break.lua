-- break.lua: free the lock whoever holds it, and serve the next waiter.
-- The fence counter is left alone, so the next grant's token is higher.
-- A lock held by readers (the readers' mark, see value.lua) loses every
-- reader's lease with the mark.
--
-- KEYS[1] lock  KEYS[2] fence  KEYS[3] queue  KEYS[4] waiters  KEYS[5] channel
-- KEYS[6] permits  KEYS[7] holders (the readers' leases; absent on Redlock,
-- which has no read-write locks)
-- ARGV[1] name (unused: a hand-off takes it from the waiter's entry)  ARGV[2] how the next waiter is woken (see wake_next)
-- Returns 1 when a lock was freed, 0 when it was free.
--@queue
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if KEYS[7] and owned_by(v, READERS) then redis.call('DEL', KEYS[6], KEYS[7]) end
wake_next(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], v)
return 1
