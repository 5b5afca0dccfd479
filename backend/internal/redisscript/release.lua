-- release.lua: free the lock if it still belongs to the owner, and serve
-- the next waiter (see wake_next) if one may be queued (a "+" after the
-- owner, see value.lua) or the waiters retry (mode 'any').
--
-- KEYS[1] lock  KEYS[2] fence  KEYS[3] queue  KEYS[4] waiters  KEYS[5] channel
-- ARGV[1] owner  ARGV[2] how the next waiter is woken (see wake_next)
-- Returns 1 when released, 0 when the lock is not the owner's.
local v = redis.call('GET', KEYS[1])
if not owned_by(v, ARGV[1]) then return 0 end
if ARGV[2] == 'any' then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[5], '')
elseif string.byte(v, #ARGV[1] + 1) == 43 then -- '+'
  --@queue
  wake_next(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], v)
else
  redis.call('DEL', KEYS[1])
end
return 1
