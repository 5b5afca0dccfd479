-- value.lua: the lock value, put in front of every script.
--
-- A lock key holds "<owner><sep><token> <len(name)> <name><holder>": the
-- owner key first (the owner checks compare that prefix), the fencing
-- token, the name and the holder metadata; Go's ParseValue reads it back.
-- A value made by a hand-off has "/<last>" after the token: the last
-- number of the block of tokens its hand-offs reserved (see wake_next in
-- queue.lua).
-- sep is "+" once a fair waiter may be queued behind this grant, " "
-- otherwise: a release looks at the queue only after a "+", so that a lock
-- nobody waits for is freed with two commands. A "+" that outlives the
-- waiters costs one look at an empty queue; a missing one would lose a
-- wake-up, so every path that leaves a waiter queued behind a held lock
-- sets it (see fair_acquire.lua and wake_next in queue.lua). Owner keys
-- contain neither " " nor "+".
--
-- While readers of a read-write lock hold it, the lock key holds the
-- readers' mark: a value whose owner is READERS (no owner key: those are
-- 32 hex digits), token 0, with a PX as long as the latest reader's lease
-- (see permits.lua). Every script that takes the lock key for a writer
-- (a mutex) thus finds it held while any reader holds, and learns from its
-- PTTL when the last reader's lease runs out.
local READERS = 'readers'

-- tail is " <len(name)> <name><holder>", which the Go side builds once per
-- acquire: the script then joins three strings, and is sent one argument
-- rather than two.
local function lock_value(owner, token, tail, mark, last)
  local t = string.format('%d', token)
  if last then t = t .. '/' .. string.format('%d', last) end
  return owner .. (mark and '+' or ' ') .. t .. tail
end

-- owned_by reports whether v is owner's lock; it makes no new string.
local function owned_by(v, owner)
  if not v then return false end
  local sep = string.byte(v, #owner + 1)
  return (sep == 32 or sep == 43) and string.find(v, owner, 1, true) == 1
end
