-- permits.lua: the permits of a semaphore (Request.Limit > 1), put into
-- the semaphore scripts where they say --@permits (after --@queue, whose
-- now_ms, live_head and entry_holder they use).
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
-- an entry key per waiter, with the same entries. A semaphore grants a permit to
-- the first live waiter only; the others are woken in turn, by their
-- owner key published on the name's channel (as a mutex's waiters are on
-- Redis Cluster): there is no hand-off.
--
-- The readers of a read-write lock (Request.Shared) are permits too, in
-- the same two keys, with one rule changed: a reader is admitted while no
-- writer holds the lock key, however many readers hold, rather than while
-- fewer than a limit hold. A writer is a mutex: it takes the lock key, and
-- while readers hold, the lock key holds the readers' mark (see value.lua)
-- with a PX as long as the latest reader's lease, so the mutex scripts
-- see the lock held, unchanged. The reader scripts take the lock key as
-- one more key (its presence is what makes them a reader's): they set the
-- mark with the first reader, keep its PX with every grant, renewal and
-- release, and delete it with the last reader's release. A reader's lease
-- is valid only under the mark: a reader whose mark has gone (its lease
-- ran out with the others', it was broken, evicted) cannot renew nor
-- release. Readers queue in the same queue as writers, and a reader is
-- granted only when first in line, so a reader that comes after a waiting
-- writer waits behind it.

-- prune drops the permits whose expiry has passed.
local function prune(permits, holders, now)
  local dead = redis.call('ZRANGEBYSCORE', permits, '-inf', now)
  if #dead == 0 then return end
  redis.call('ZREMRANGEBYSCORE', permits, '-inf', now)
  for i = 1, #dead, 1000 do -- unpack has a limit; a semaphore may have 10000 permits
    redis.call('HDEL', holders, unpack(dead, i, math.min(i + 999, #dead)))
  end
end

-- keep_until makes both keys live as long as the latest permit; for
-- readers (lock given), the readers' mark too, which it sets if it is not
-- there (name is then needed).
local function keep_until(permits, holders, now, lock, name)
  local last = redis.call('ZRANGE', permits, -1, -1, 'WITHSCORES')
  if last[2] then
    local left = math.max(tonumber(last[2]) - now, 1)
    redis.call('PEXPIRE', permits, left)
    redis.call('PEXPIRE', holders, left)
    if lock and redis.call('PEXPIRE', lock, left) == 0 then
      redis.call('SET', lock, lock_value(READERS, 0, tail_of(name, '')), 'PX', left)
    end
  end
end

-- writer_of returns the value of the lock key if a writer holds it, or
-- false (readers hold it, or nobody). When nobody does, permits left in
-- the keys are stale (their mark ran out or was broken) and are dropped.
local function writer_of(lock, permits, holders)
  local v = redis.call('GET', lock)
  if not v then
    redis.call('DEL', permits, holders)
    return false
  end
  if owned_by(v, READERS) then return false end
  return v
end

-- limit_of is the number of permits a waiter asks for, from the "limit"
-- the portable layer writes first in the holder metadata (as
-- driver.HolderLimit reads it); 1 when there is none.
local function limit_of(entry)
  return entry and tonumber(string.match(entry_holder(entry), '"limit":(%d+)')) or 1
end

-- admits reports whether a waiter with this entry would be granted now,
-- held permits (or readers) being held and no writer: a reader always, any
-- other while fewer than its limit are held (a writer, limit 1, while
-- nothing is held). It is driver.QueueHolders' rule for the first waiter,
-- the holders being the contenders ahead of it; as only the first waiter
-- is granted, and each grant wakes the next, the queue as a whole is
-- granted by that rule, as etcd's and ZooKeeper's are.
local function admits(entry, held)
  return is_shared(entry) or held < limit_of(entry)
end

-- wake_head publishes the first live waiter's owner key on the name's
-- channel if that waiter would be granted now (see admits; the caller
-- knows that no writer holds): it then tries.
local function wake_head(queue, waiters, channel, held)
  local head, entry = live_head(queue, waiters)
  if head and admits(entry, held) then
    redis.call('PUBLISH', channel, head)
  end
end
