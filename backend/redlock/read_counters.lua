-- read_counters.lua: read fence counters for a seeding, together with the
-- node's fence state, in one step.
--
-- KEYS[1] the node's fence-state key; then, for each lock, its fence key,
-- its lock key, and its semaphore's permits and holders keys.
-- Returns {state, counter1, between1, counter2, between2, ...}, where
-- between is 1 when the lock holds token 0, or a live permit of the
-- semaphore does: a grant has done its first round and not yet its
-- second, which will raise this counter (the seeding must read it again).
local out = {redis.call('GET', KEYS[1]) or ''}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 2, #KEYS, 4 do
  out[#out + 1] = tonumber(redis.call('GET', KEYS[i]) or '0')
  local v = redis.call('GET', KEYS[i + 1])
  local between = (v and string.match(v, '^[^ +]+[ +]0 ')) and 1 or 0
  if between == 0 and redis.call('TYPE', KEYS[i + 2]).ok == 'zset' then
    for _, owner in ipairs(redis.call('ZRANGEBYSCORE', KEYS[i + 2], '(' .. now, '+inf')) do
      local e = redis.call('HGET', KEYS[i + 3], owner)
      if e and string.sub(e, 1, 2) == '0 ' then between = 1 break end
    end
  end
  out[#out + 1] = between
end
return out
