-- slots.lua: Redlock's semaphore (package redlock), put into its scripts
-- where they say --@slots (after --@queue and --@permits, whose now_ms and
-- prune they use).
--
-- A semaphore of n permits is n slots, 0..n-1, and a grant is one slot
-- held on a majority of the nodes: on each node a slot has at most one
-- holder, so a slot has at most one holder across the nodes, and a
-- semaphore at most n. (Counting the permits on each node would not do:
-- with three nodes and n = 2, holders on {1,2}, {2,3} and {1,3} leave
-- every node with two.) On a node, the permits are those of permits.lua,
-- a sorted set of owners scored by expiry and the holders hash, with the
-- slot in each entry, owner -> "<token> <slot> <holder>", and a pointer
-- '#<slot>' -> owner in the same hash. A pointer whose owner no longer
-- holds a live permit for that slot is stale: the slot is free.

-- slot_of is the slot in a holders entry (nil if none).
local function slot_of(entry)
  return tonumber(string.match(entry or '', '^%d+ (%d+)'))
end

-- holds reports whether owner holds slot with a live permit.
local function holds(permits, holders, owner, slot, now)
  local e = redis.call('ZSCORE', permits, owner)
  return e ~= false and tonumber(e) > now and slot_of(redis.call('HGET', holders, owner)) == slot
end

local function slot_free(permits, holders, slot, now)
  local o = redis.call('HGET', holders, '#' .. slot)
  return not o or not holds(permits, holders, o, slot, now)
end
