-- slot_token.lua: Redlock's second round for a permit, on one node (see
-- slots.lua). Permits are held at once, so unlike a mutex's grants two of
-- them can read the same counters in their first rounds and decide the
-- same token: a node therefore gives a token to one grant only. It claims
-- the token for this grant if its counter is below it, raising the counter
-- to it; a grant needs the claim of a majority of nodes with complete
-- counters, and two majorities share a node, which claimed for one of them
-- only. Where the owner holds the slot, the token is stored in its entry.
--
-- KEYS[1] permits  KEYS[2] holders  KEYS[3] fence  KEYS[4] the node's
-- fence-state key
-- ARGV[1] owner  ARGV[2] token  ARGV[3] slot
-- Returns {claimed (1 or 0), held (1: the owner holds the slot here, and
-- the token is stored), fence state}.
--@queue
--@permits
--@slots
local claimed = 0
if tonumber(redis.call('GET', KEYS[3]) or '0') < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[3], ARGV[2])
  claimed = 1
end
local state = redis.call('GET', KEYS[4]) or ''
if not holds(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[3]), now_ms()) then return {claimed, 0, state} end
local v = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. string.match(v, '^%d+( .*)$'))
return {claimed, 1, state}
