-- read_counters.lua: read fence counters for a seeding, together with the
-- node's fence state, in one step.
--
-- KEYS[1] the node's fence-state key; then, for each lock, its fence key
-- and its lock key.
-- Returns {state, counter1, between1, counter2, between2, ...}, where
-- between is 1 when the lock holds token 0: a grant has done its first
-- round and not yet its second, which will raise this counter (the
-- seeding must read it again).
local out = {redis.call('GET', KEYS[1]) or ''}
for i = 2, #KEYS, 2 do
  out[#out + 1] = tonumber(redis.call('GET', KEYS[i]) or '0')
  local v = redis.call('GET', KEYS[i + 1])
  out[#out + 1] = (v and string.match(v, '^[^ +]+[ +]0 ')) and 1 or 0
end
return out
