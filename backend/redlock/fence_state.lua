-- fence_state.lua: move a node's fence-state key (see seed.go) from one
-- state to the next, in one step, so that a node that restarts in between
-- (and so lost the key) is never marked complete.
--
-- KEYS[1] the node's fence-state key (no TTL)
-- ARGV[1] 'new': a first seeding of every node begins; an unmarked node
--         becomes 'new' (a marked one is left alone);
--         'unnew': that first seeding found it may not run; a node it
--         marked 'new' is unmarked again;
--         'seeding': a re-seed begins; unless the node is 'complete', it
--         becomes 'seeding <ARGV[2]>', which a concurrent re-seed, or a
--         restart, replaces;
--         'complete': the counters have been copied; the node becomes
--         'complete' if its state is still ARGV[2], the one the copy began
--         with.
-- Returns the state before ("" if none).
local s = redis.call('GET', KEYS[1]) or ''
local op = ARGV[1]
if op == 'new' then
  if s == '' then redis.call('SET', KEYS[1], 'new') end
elseif op == 'unnew' then
  if s == 'new' then redis.call('DEL', KEYS[1]) end
elseif op == 'seeding' then
  if s ~= 'complete' then redis.call('SET', KEYS[1], 'seeding ' .. ARGV[2]) end
elseif op == 'complete' then
  if s == ARGV[2] then redis.call('SET', KEYS[1], 'complete') end
end
return s
