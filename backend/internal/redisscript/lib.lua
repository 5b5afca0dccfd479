-- lib.lua: helpers prepended to every script: the lock value, the owner
-- check, and the fair-mode waiter queue and its hand-off.
--
-- The queue is a list of owner keys in arrival order. Each waiter also has
-- an entry "<expiry ms> <ttl ms> <process channel> <holder>" in the waiters
-- hash, its expiry pushed forward by its heartbeat. A waiter that stops renewing it (killed, cut off) is dropped as
-- soon as it reaches the head, so it never delays the waiters behind it.

-- Redis 5 and 6 need this before a script may call TIME and then write;
-- Redis 7 always replicates a script's effects.
if redis.replicate_commands then redis.replicate_commands() end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- live_head drops dead waiters from the head of the queue and returns the
-- first live one (or false when the queue is empty), the time if it had to
-- read the clock, and the head's entry if it read it. The caller's own
-- entry needs no check: it is making this call.
local function live_head(queue, waiters, caller)
  local head = redis.call('LINDEX', queue, 0)
  local now, entry
  while head and head ~= caller do
    now = now or now_ms()
    entry = redis.call('HGET', waiters, head)
    if entry and tonumber(string.match(entry, '^(%d+)')) > now then break end
    redis.call('LPOP', queue)
    if entry then redis.call('HDEL', waiters, head) end
    entry = nil
    head = redis.call('LINDEX', queue, 0)
  end
  return head or false, now, entry
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

-- wake_next runs when the lock has just become free. mode says how the
-- next waiter learns it:
--   'handoff': the first live waiter is granted the lock right here — its
--     process learns the token from the message on its process channel,
--     with no request of its own — provided that process still listens:
--     PUBLISH counts the receivers, and a waiter whose process has died
--     (its connection closed with it) is skipped;
--   'first': the first waiter is woken by its owner key on the lock's
--     channel, and tries (Redis Cluster, where PUBLISH counts one node's
--     receivers only);
--   'any': "" on the lock's channel wakes whoever listens (Redlock's
--     waiters, which retry rather than queue).
-- With no queue, only 'any' publishes: queued waiters need no word of a
-- release that finds nobody queued.
local function wake_next(lock, fence, queue, waiters, channel, name, mode)
  while true do
    local head, _, entry = live_head(queue, waiters)
    if not head then
      if mode == 'any' then redis.call('PUBLISH', channel, '') end
      return
    end
    if mode ~= 'handoff' then
      redis.call('PUBLISH', channel, head)
      return
    end
    local ttl, proc, holder = string.match(entry, '^%d+ (%d+) (%S+) (.*)$')
    redis.call('LPOP', queue)
    redis.call('HDEL', waiters, head)
    local token = redis.call('INCR', fence)
    redis.call('SET', lock, lock_value(head, token, name, holder), 'PX', ttl)
    if redis.call('PUBLISH', proc, head .. ' ' .. string.format('%d', token)) > 0 then return end
    redis.call('DEL', lock)
  end
end
