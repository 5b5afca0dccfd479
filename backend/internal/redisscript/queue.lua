-- queue.lua: the fair-mode waiter queue and its hand-off, put into the
-- scripts that need them where they say --@queue (inside the branch that
-- needs them, so that a script's fast path does not pay for defining
-- them).
--
-- The queue is a list of owner keys in arrival order. Each waiter also has
-- an entry key, <waiters><owner> (waiters is the scripts' KEYS[4] or
-- KEYS[5], a key prefix with the lock's hash tag), holding
-- "<ttl ms> <process channel> <len(name)> <name><holder>" with a PX of the
-- waiter TTL, which the waiter's heartbeat sets again. A waiter is live
-- while its entry key exists: a waiter that stops renewing it (killed, cut
-- off) is dropped as soon as it reaches the head, so it never delays the
-- waiters behind it, and the liveness check is the read of the entry that
-- a hand-off needs anyway (no clock read). A waiter taken off the queue
-- (granted, handed the lock) keeps its entry key until it expires: a
-- waiter whose entry exists may thus be missing from the list, and its
-- next attempt puts it back (see enqueue).

-- Redis 5 and 6 need this before a script may call TIME and then write
-- (the scripts say --@queue before their first write); Redis 7 always
-- replicates a script's effects.
if redis.replicate_commands then redis.replicate_commands() end

-- TOKEN_BLOCK is how many tokens a hand-off reserves at a time (see
-- wake_next).
local TOKEN_BLOCK = 64

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

-- entry_holder is the holder metadata of a waiter's entry (after the name,
-- which may hold anything).
local function entry_holder(entry)
  local n, p = string.match(entry, '^%d+ %S+ (%d+) ()')
  return string.sub(entry, p + tonumber(n))
end

-- live_head drops dead waiters from the head of the queue and returns the
-- first live one (or false when the queue is empty) and its entry (false
-- for the caller's own: it is making this call, so it needs no check).
-- first, if given, is the head the caller has just read (LINDEX queue 0),
-- so that it is not read twice.
local function live_head(queue, waiters, caller, first)
  local head = first
  if head == nil then head = redis.call('LINDEX', queue, 0) end
  while head and head ~= caller do
    local entry = redis.call('GET', waiters .. head)
    if entry then return head, entry end
    redis.call('LPOP', queue)
    head = redis.call('LINDEX', queue, 0)
  end
  return head or false, false
end

-- enqueue puts owner's entry (see above) with a PX of wttl ms, and the
-- owner at the back of the queue unless it is in it already; the queue
-- then lives as long as this entry. A new entry (SET NX) is a new waiter:
-- one command. An entry that exists is a heartbeat, which also makes sure
-- the owner is still in the list (a hand-off that came to nothing, or a
-- queue that expired with another waiter's shorter TTL, may have taken it
-- out), so that no live waiter is left out of the queue.
-- Returns false for a new waiter that joined behind others (it is handed
-- the lock in turn, and needs no word of the lock's expiry before its
-- first heartbeat), true otherwise.
local function enqueue(queue, waiters, owner, entry, wttl)
  local key = waiters .. owner
  local first = true
  if redis.call('SET', key, entry, 'NX', 'PX', wttl) then
    first = redis.call('RPUSH', queue, owner) == 1
  else
    redis.call('SET', key, entry, 'PX', wttl)
    local at = redis.pcall('LPOS', queue, owner)
    if type(at) == 'table' and at.err then -- no LPOS before Redis 6.0.6
      at = false
      for _, o in ipairs(redis.call('LRANGE', queue, 0, -1)) do
        if o == owner then at = true break end
      end
    end
    if not at then redis.call('RPUSH', queue, owner) end
  end
  -- The queue vanishes a heartbeat period after its last live waiter.
  redis.call('PEXPIRE', queue, wttl)
  return first
end

-- is_shared reports whether a waiter's entry is a reader's of a read-write
-- lock (the "shared" the portable layer writes into the holder metadata,
-- as driver.HolderShared reads it).
local function is_shared(entry)
  return entry and string.find(entry_holder(entry), '"shared":true', 1, true) ~= nil
end

-- mark_queued marks the held lock value v, if it is not marked yet, so
-- that its release serves the queue (see value.lua).
local function mark_queued(lock, v)
  if string.match(v, '^[^ +]+(.)') == ' ' then
    redis.call('SET', lock, (string.gsub(v, '^([^ +]+) ', '%1+', 1)), 'KEEPTTL')
  end
end

-- wake_next runs when the lock is to be freed: held is the value the lock
-- key still holds, the releasing owner's (a hand-off overwrites it, so it
-- is deleted only if nobody takes the lock), or false. mode says how the
-- next waiter learns it:
--   'handoff': the first live waiter is granted the lock right here — its
--     process learns the token from the message on its process channel,
--     with no request of its own — provided that process still listens:
--     PUBLISH counts the receivers, and a waiter whose process has died
--     (its connection closed with it) is skipped. The new value is
--     marked: the waiters behind it need the release to serve them. Its
--     token comes from a block of TOKEN_BLOCK numbers that a hand-off
--     reserves from the fence counter with one INCRBY and writes, as
--     "/<last>", into the value after the token: the next hand-off of
--     that value takes the token after it, with no command, until the
--     block is used up. Tokens still increase strictly: a hand-off
--     overwrites the value it hands on, so one chain of hand-offs uses a
--     block, and every other grant takes the counter's next value, past
--     the block's last;
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
local function wake_next(lock, fence, queue, waiters, channel, mode, held)
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
  -- The token of the value handed on, and the last of its block.
  local cur, last
  if held then cur, last = string.match(held, '^[^ +]+[ +](%d+)/(%d+) ') end
  local head = redis.call('LPOP', queue)
  while head do
    local key = waiters .. head
    local entry = redis.call('GET', key)
    if entry and is_shared(entry) then
      -- It stays first in line; a queue that the LPOP emptied comes back
      -- with the reader's entry's TTL, so that it cannot outlive it.
      if redis.call('LPUSH', queue, head) == 1 then
        local left = redis.call('PTTL', key)
        if left > 0 then redis.call('PEXPIRE', queue, left) end
      end
      if held then redis.call('DEL', lock) end
      redis.call('PUBLISH', channel, head)
      return
    end
    if entry then
      -- The entry is left to expire: the waiter, granted, does not renew it.
      local ttl, proc, tail = string.match(entry, '^(%d+) (%S+)( .*)$')
      local token
      if last and tonumber(cur) < tonumber(last) then
        token = tonumber(cur) + 1
      else
        last = redis.call('INCRBY', fence, TOKEN_BLOCK)
        token = last - TOKEN_BLOCK + 1
      end
      cur = token
      local v = lock_value(head, token, tail, true, last)
      redis.call('SET', lock, v, 'PX', ttl)
      if redis.call('PUBLISH', proc, head .. ' ' .. string.format('%d', token)) > 0 then return head, token end
      held = v -- nobody took it: undone below unless the next one does
    end
    head = redis.call('LPOP', queue)
  end
  if held then redis.call('DEL', lock) end
end
