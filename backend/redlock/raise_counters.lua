-- raise_counters.lua: raise fence counters copied by a seeding. A counter
-- is only ever raised, so that a seeding that read an older value cannot
-- lower what a grant wrote meanwhile.
--
-- KEYS the fence keys  ARGV their new values, in the same order
for i = 1, #KEYS do
  if tonumber(redis.call('GET', KEYS[i]) or '0') < tonumber(ARGV[i]) then
    redis.call('SET', KEYS[i], ARGV[i])
  end
end
return #KEYS
