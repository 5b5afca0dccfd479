-- set_token.lua: Redlock's second round. Store the token decided across the
-- nodes in the owner's lock, and raise the node's fence counter to it, so
-- that any later majority, which shares a node with this one, reads it.
--
-- KEYS[1] lock  KEYS[2] fence
-- ARGV[1] owner  ARGV[2] token
-- Returns 1 when stored, 0 when the lock is not the owner's (expired).
local v = redis.call('GET', KEYS[1])
if not owned_by(v, ARGV[1]) then return 0 end
local rest = string.match(v, '^%S+ %d+(.*)$')
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2] .. rest, 'KEEPTTL')
local token = tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '0') < token then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
