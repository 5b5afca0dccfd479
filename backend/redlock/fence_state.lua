-- fence_state.lua: move a node's fence-state key (see seed.go) from one
-- state to the next, in one step, so that a node that restarts in between
-- (and so lost the key) is never marked complete.
--
-- KEYS[1] the node's fence-state key (no TTL)
-- ARGV[1] 'new': a first seeding of every node begins; an unmarked node
--         becomes 'new' (a marked one is left alone);
--         'unnew': that first seeding found it may not run; a node it
--         marked 'new' is unmarked again;
--         'seeding': a re-seed by ARGV[2] begins, unless the node is
--         'complete' or another client's re-seed of it is under way (its
--         claim has not run out): the node becomes 'seeding <ARGV[2]>
--         <until>', a claim for ARGV[3] ms on the server's clock, which
--         a restart drops, and another client may take over once it has
--         run out;
--         'complete': the counters have been copied; the node becomes
--         'complete' if its state is still ARGV[2], the one the copy began
--         with.
-- Returns the state before ("" if none); 'seeding' returns the state
-- after.

-- Redis 5 and 6 need this before a script may call TIME and then write.
if redis.replicate_commands then redis.replicate_commands() end

local s = redis.call('GET', KEYS[1]) or ''
local op = ARGV[1]
if op == 'new' then
  if s == '' then redis.call('SET', KEYS[1], 'new') end
elseif op == 'unnew' then
  if s == 'new' then redis.call('DEL', KEYS[1]) end
elseif op == 'seeding' then
  if s == 'complete' then return s end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if tonumber(string.match(s, '^seeding %S+ (%d+)$') or '0') > now then return s end
  s = 'seeding ' .. ARGV[2] .. ' ' .. string.format('%d', now + tonumber(ARGV[3]))
  redis.call('SET', KEYS[1], s)
elseif op == 'complete' then
  if s == ARGV[2] then redis.call('SET', KEYS[1], 'complete') end
end
return s
