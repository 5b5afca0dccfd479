-- slot_acquire.lua: Redlock's first round for a permit of a semaphore, on
-- one node (see slots.lua). If fewer than the caller's limit of permits
-- are held here, take a free slot below the limit (the preferred one if it
-- is free, else the lowest), with token 0 (slot_token.lua stores the token
-- decided across the nodes); report, read in the same step, the name's
-- fence counter (the mutex's) and the node's fence state, as acquire.lua's
-- "read" mode does for a mutex.
--
-- KEYS[1] permits  KEYS[2] holders  KEYS[3] fence  KEYS[4] the node's
-- fence-state key
-- ARGV[1] owner  ARGV[2] TTL in ms  ARGV[3] limit  ARGV[4] preferred slot
-- ("-1": none)  ARGV[5] name  ARGV[6] holder metadata
-- Returns {1, slot, counter, state} when granted; {0, ms, counter, state}
-- when not, ms being the time left on the permit that expires first (-1
-- if none is held).
--@queue
--@permits
--@slots
local permits, holders, fence = KEYS[1], KEYS[2], KEYS[3]
local owner, limit, pref = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4])
local counter = tonumber(redis.call('GET', fence) or '0')
local state = redis.call('GET', KEYS[4]) or ''
local now = now_ms()
-- A permit of an earlier attempt of this owner that its give-back did not
-- reach: this attempt replaces it.
if redis.call('ZREM', permits, owner) == 1 then redis.call('HDEL', holders, owner) end
prune(permits, holders, now)
if redis.call('ZCARD', permits) < limit then
  local slot = nil
  if pref >= 0 and pref < limit and slot_free(permits, holders, pref, now) then
    slot = pref
  else
    -- Fewer than limit permits are held, so one of 0..limit-1 is free.
    for j = 0, limit - 1 do
      if slot_free(permits, holders, j, now) then slot = j break end
    end
  end
  redis.call('ZADD', permits, now + tonumber(ARGV[2]), owner)
  redis.call('HSET', holders, owner, '0 ' .. slot .. ' ' .. ARGV[6], '#' .. slot, owner, '', ARGV[5])
  keep_until(permits, holders, now)
  -- The fence key exists from the first round on, so that a seeding finds
  -- this grant by it (see acquire.lua).
  if counter == 0 then redis.call('SET', fence, 0, 'NX') end
  return {1, slot, counter, state}
end
local first = redis.call('ZRANGE', permits, 0, 0, 'WITHSCORES')
if first[2] then return {0, tonumber(first[2]) - now, counter, state} end
return {0, -1, counter, state}
