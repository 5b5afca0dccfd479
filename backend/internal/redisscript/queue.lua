-- queue.lua: the fair-mode waiter queue and its hand-off, put into the
-- scripts that need them where they say --@queue (inside the branch that
-- needs them, so that a script's fast path does not pay for defining
-- them).
--
-- The queue is a list of owner keys in arrival order. Each waiter also has
-- an entry "<expiry ms> <ttl ms> <process channel> <holder>" in the waiters
-- hash, its expiry pushed forward by its heartbeat. A waiter that stops
-- renewing it (killed, cut off) is dropped as soon as it reaches the head,
-- so it never delays the waiters behind it.

-- Redis 5 and 6 need this before a script may call TIME and then write
-- (the scripts say --@queue before their first write); Redis 7 always
-- replicates a script's effects.
if redis.replicate_commands then redis.replicate_commands() end

-- tail_of builds a value's tail (see lock_value) in the script, for a
-- grant from the queue.
local function tail_of(name, holder)
  return ' ' .. #name .. ' ' .. name .. holder
end

-- name_at reads the name from the " <len(name)> <name>" of a value or a
-- tail s that begins at position i.
local function name_at(s, i)
  local n, p = string.match(s, '^ (%d+) ()', i)
  return string.sub(s, p, p + tonumber(n) - 1)
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function live(entry, now)
  return entry and tonumber(string.match(entry, '^(%d+)')) > now
end

-- live_head drops dead waiters from the head of the queue and returns the
-- first live one (or false when the queue is empty) and the time if it
-- had to read the clock. The caller's own entry needs no check: it is
-- making this call. first, if given, is the head the caller has just read
-- (LINDEX queue 0), so that it is not read twice.
local function live_head(queue, waiters, caller, first)
  local head = first
  if head == nil then head = redis.call('LINDEX', queue, 0) end
  local now
  while head and head ~= caller do
    now = now or now_ms()
    local entry = redis.call('HGET', waiters, head)
    if live(entry, now) then break end
    redis.call('LPOP', queue)
    if entry then redis.call('HDEL', waiters, head) end
    head = redis.call('LINDEX', queue, 0)
  end
  return head or false, now
end

-- is_shared reports whether a waiters entry is a reader's of a read-write
-- lock (the "shared" the portable layer writes into the holder metadata,
-- as driver.HolderShared reads it).
local function is_shared(entry)
  return entry and string.find(entry, '"shared":true', 1, true) ~= nil
end

-- mark_queued marks the held lock value v, if it is not marked yet, so
-- that its release serves the queue (see value.lua).
local function mark_queued(lock, v)
  if string.match(v, '^[^ +]+(.)') == ' ' then
    redis.call('SET', lock, (string.gsub(v, '^([^ +]+) ', '%1+', 1)), 'KEEPTTL')
  end
end

-- wake_next runs when the lock is to be freed: held says the lock key
-- still holds the releasing owner's value (a hand-off overwrites it, so
-- it is deleted only if nobody takes the lock). mode says how the next
-- waiter learns it:
--   'handoff': the first live waiter is granted the lock right here — its
--     process learns the token from the message on its process channel,
--     with no request of its own — provided that process still listens:
--     PUBLISH counts the receivers, and a waiter whose process has died
--     (its connection closed with it) is skipped. The new value is
--     marked: the waiters behind it need the release to serve them;
--   'first': the first waiter is woken by its owner key on the lock's
--     channel, and tries (Redis Cluster, where PUBLISH counts one node's
--     receivers only);
--   'any': "" on the lock's channel wakes whoever listens (Redlock's
--     waiters, which retry rather than queue).
-- A reader of a read-write lock is never handed the lock (a hand-off
-- grants the lock key, which is a writer's): when the first live waiter is
-- a reader, the lock is freed and the reader woken by its owner key on the
-- lock's channel, as in 'first'; it then takes a reader's lease itself
-- (permit_acquire.lua), and wakes the reader behind it.
-- With no queue, only 'any' publishes: queued waiters need no word of a
-- release that finds nobody queued.
-- Returns the owner key the lock was handed to and its token, if it was
-- (so that a caller that is itself queued learns it was reached without
-- reading the lock again).
local function wake_next(lock, fence, queue, waiters, channel, name, mode, held)
  if mode ~= 'handoff' then
    if held then redis.call('DEL', lock) end
    local head = live_head(queue, waiters)
    if head then
      redis.call('PUBLISH', channel, head)
    elseif mode == 'any' then
      redis.call('PUBLISH', channel, '')
    end
    return
  end
  local now
  local head = redis.call('LPOP', queue)
  while head do
    local entry = redis.call('HGET', waiters, head)
    if entry then
      now = now or now_ms()
      if live(entry, now) and is_shared(entry) then
        -- It stays first in line; a queue that the LPOP emptied comes back
        -- with the waiters' TTL, so that it cannot outlive them.
        if redis.call('LPUSH', queue, head) == 1 then
          local left = redis.call('PTTL', waiters)
          if left > 0 then redis.call('PEXPIRE', queue, left) end
        end
        if held then redis.call('DEL', lock) end
        redis.call('PUBLISH', channel, head)
        return
      end
      redis.call('HDEL', waiters, head)
      if live(entry, now) then
        local ttl, proc, holder = string.match(entry, '^%d+ (%d+) (%S+) (.*)$')
        local token = redis.call('INCR', fence)
        redis.call('SET', lock, lock_value(head, token, tail_of(name, holder), true), 'PX', ttl)
        if redis.call('PUBLISH', proc, head .. ' ' .. string.format('%d', token)) > 0 then return head, token end
        held = true -- nobody took it: undone below unless the next one does
      end
    end
    head = redis.call('LPOP', queue)
  end
  if held then redis.call('DEL', lock) end
end
