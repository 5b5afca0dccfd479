-- set_token.lua: Redlock's second round. Raise the node's fence counter to
-- the token decided across the nodes, so that any later majority, which
-- shares a node with the nodes written, reads it; and store the token in
-- the owner's lock if the lock is the owner's. The counter is raised on
-- nodes where the lock is someone else's too: the more nodes hold the
-- latest counter, the more nodes may lose theirs (see package redlock).
--
-- KEYS[1] lock  KEYS[2] fence
-- ARGV[1] owner  ARGV[2] token
-- Returns 1 when stored, 0 when the lock is not the owner's (expired, or
-- another's).
local token = tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '0') < token then
  redis.call('SET', KEYS[2], ARGV[2])
end
local v = redis.call('GET', KEYS[1])
if not owned_by(v, ARGV[1]) then return 0 end
local sep, rest = string.match(v, '^[^ +]+([ +])%d+(.*)$')
redis.call('SET', KEYS[1], ARGV[1] .. sep .. ARGV[2] .. rest, 'KEEPTTL')
return 1
