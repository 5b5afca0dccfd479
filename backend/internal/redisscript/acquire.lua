-- acquire.lua: take the lock if it is free, in one round trip: SET NX PX
-- with the fencing token in the value.
--
-- KEYS[1] lock  KEYS[2] fence counter (no TTL: it must outlive every lock)
-- ARGV[1] owner  ARGV[2] TTL in ms  ARGV[3] name  ARGV[4] holder metadata
-- ARGV[5] "incr": the token is the next value of the fence counter (Redis);
--         "read": store token 0 and report the counter, for Redlock, whose
--         token is decided across nodes and stored by set_token.lua.
-- Returns {1, token or counter} when granted, {0, pttl} when held.
if ARGV[5] == 'incr' then
  -- The token is taken first, so that SET NX decides in one call; an
  -- attempt that finds the lock held uses up a number, which is harmless:
  -- tokens need only increase.
  local token = redis.call('INCR', KEYS[2])
  if redis.call('SET', KEYS[1], lock_value(ARGV[1], token, ARGV[3], ARGV[4]), 'NX', 'PX', ARGV[2]) then
    return {1, token}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl ~= -2 then return {0, pttl} end
local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
redis.call('SET', KEYS[1], lock_value(ARGV[1], 0, ARGV[3], ARGV[4]), 'PX', ARGV[2])
return {1, counter}
