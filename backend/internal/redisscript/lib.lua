-- lib.lua: helpers prepended to every script: the lock value, the owner
-- check, and the fair-mode waiter queue.
--
-- The queue is a list of owner keys in arrival order. Each waiter also has
-- an entry "<expiry ms> <holder>" in the waiters hash, pushed forward by its
-- heartbeat. A waiter that stops renewing it (killed, cut off) is dropped as
-- soon as it reaches the head, so it never delays the waiters behind it.

-- Redis 5 and 6 need this before a script may call TIME and then write;
-- Redis 7 always replicates a script's effects.
if redis.replicate_commands then redis.replicate_commands() end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- live_head drops dead waiters from the head of the queue and returns the
-- first live one, or false when the queue is empty. It reads the clock only
-- when there is a queue.
local function live_head(queue, waiters)
  local head = redis.call('LINDEX', queue, 0)
  local now
  while head do
    now = now or now_ms()
    local v = redis.call('HGET', waiters, head)
    if v and tonumber(string.match(v, '^(%d+)')) > now then return head end
    redis.call('LPOP', queue)
    if v then redis.call('HDEL', waiters, head) end
    head = redis.call('LINDEX', queue, 0)
  end
  return false
end

-- wake_next tells the waiters that the lock is free: the first live queued
-- waiter by its owner key, or, with no queue, anyone listening (payload "").
local function wake_next(queue, waiters, channel)
  redis.call('PUBLISH', channel, live_head(queue, waiters) or '')
end

-- lock_value is what the lock key holds: the owner key first (the owner
-- checks compare that prefix), then the token, the name and the holder
-- metadata. Go's ParseValue reads it back.
local function lock_value(owner, token, name, holder)
  return owner .. ' ' .. string.format('%d', token) .. ' ' .. #name .. ' ' .. name .. holder
end

local function owned_by(v, owner)
  return v and string.sub(v, 1, #owner + 1) == owner .. ' '
end
