-- leave_queue.lua: a fair waiter gives up (its context ended). It leaves
-- the queue; if a release handed it the lock meanwhile, the lock goes on
-- to the next waiter; if it was first in line and the lock is free, the
-- next waiter is served, since no release will come to do it; if
-- readers hold it, a reader now first in line is woken to join them.
--
-- KEYS[1] lock  KEYS[2] fence  KEYS[3] queue  KEYS[4] waiters (the entry keys' prefix)
-- KEYS[5] channel
-- ARGV[1] owner  ARGV[2] name (unused: a hand-off takes it from the waiter's entry)  ARGV[3] how the next waiter is woken (see wake_next)
--@queue
local removed = redis.call('LREM', KEYS[3], 0, ARGV[1])
redis.call('DEL', KEYS[4] .. ARGV[1])
local v = redis.call('GET', KEYS[1])
if owned_by(v, ARGV[1]) then
  wake_next(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[3], v)
elseif removed > 0 and not v then
  wake_next(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[3], false)
elseif removed > 0 and owned_by(v, READERS) then
  -- Readers hold it: a reader that waited behind this writer may now join
  -- them, and no release would tell it so.
  local head, entry = live_head(KEYS[3], KEYS[4])
  if head and is_shared(entry) then
    redis.call('PUBLISH', KEYS[5], head)
  end
end
return removed
