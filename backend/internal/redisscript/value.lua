-- value.lua: the lock value, put in front of every script.
--
-- A lock key holds "<owner> <token><mark> <len(name)> <name><holder>":
-- the owner key first (the owner checks compare that prefix), the fencing
-- token, the name and the holder metadata; Go's ParseValue reads it back.
-- <mark> is "+" once a fair waiter may be queued behind this grant, and
-- empty otherwise: a release looks at the queue only when it is there, so
-- that a lock nobody waits for is freed with two commands. A mark that
-- outlives the waiters costs one look at an empty queue; a missing one
-- would lose a wake-up, so every path that leaves a waiter queued behind a
-- held lock sets it (see fair_acquire.lua and wake_next in queue.lua).

local function lock_value(owner, token, name, holder, mark)
  return owner .. ' ' .. string.format('%d', token) .. (mark and '+ ' or ' ') .. #name .. ' ' .. name .. holder
end

local function owned_by(v, owner)
  return v and string.sub(v, 1, #owner + 1) == owner .. ' '
end

local function marked(v)
  return string.find(v, '^%S+ %d+%+') ~= nil
end
