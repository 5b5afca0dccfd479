-- permits.lua: the permits of a semaphore (Request.Limit > 1), put into
-- the semaphore scripts where they say --@permits (after --@queue, whose
-- now_ms and live_head they use).
--
-- A semaphore's holders are a sorted set, permits (member: the owner key;
-- score: the permit's expiry in ms by the server's clock, TIME), and a
-- hash, holders (owner -> "<token> <holder metadata>", and "" -> the
-- name, for List). Expiry is a score rather than a PEXPIRE'd key per
-- owner so that counting the permits held is one ZCARD on one key, in the
-- same script as the grant: per-owner keys would need an index of their
-- own, and it would go on listing an expired key until someone cleaned it
-- up, which is what prune does here. Every script prunes before it counts,
-- so an expired permit frees its place at the next attempt, with no
-- message needed. Both keys also get a PEXPIRE as long as the latest
-- permit's, so a semaphore whose holders all died leaves nothing behind.
--
-- Waiters use the mutex's queue (see queue.lua): a list of owner keys and
-- the waiters hash, with the same entries. A semaphore grants a permit to
-- the first live waiter only; the others are woken in turn, by their
-- owner key published on the name's channel (as a mutex's waiters are on
-- Redis Cluster): there is no hand-off.

-- prune drops the permits whose expiry has passed.
local function prune(permits, holders, now)
  local dead = redis.call('ZRANGEBYSCORE', permits, '-inf', now)
  if #dead == 0 then return end
  redis.call('ZREMRANGEBYSCORE', permits, '-inf', now)
  for i = 1, #dead, 1000 do -- unpack has a limit; a semaphore may have 10000 permits
    redis.call('HDEL', holders, unpack(dead, i, math.min(i + 999, #dead)))
  end
end

-- keep_until makes both keys live as long as the latest permit.
local function keep_until(permits, holders, now)
  local last = redis.call('ZRANGE', permits, -1, -1, 'WITHSCORES')
  if last[2] then
    local left = math.max(tonumber(last[2]) - now, 1)
    redis.call('PEXPIRE', permits, left)
    redis.call('PEXPIRE', holders, left)
  end
end

-- limit_of is the number of permits a waiter asks for, from the "limit"
-- the portable layer writes first in the holder metadata (as
-- driver.HolderLimit reads it); 1 when there is none.
local function limit_of(entry)
  return tonumber(string.match(entry or '', '"limit":(%d+)')) or 1
end

-- wake_head publishes the first live waiter's owner key on the name's
-- channel if that waiter would be granted a permit now (fewer than its
-- limit are held): it then tries.
local function wake_head(queue, waiters, channel, held)
  local head = live_head(queue, waiters)
  if head and held < limit_of(redis.call('HGET', waiters, head)) then
    redis.call('PUBLISH', channel, head)
  end
end
