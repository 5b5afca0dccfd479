-- extend.lua: renew the lease if it still belongs to the owner.
--
-- KEYS[1] lock
-- ARGV[1] owner  ARGV[2] TTL in ms
-- Returns 1 when renewed, 0 when the lock is not the owner's.
if not owned_by(redis.call('GET', KEYS[1]), ARGV[1]) then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
