-- slot_release: a holder gives its slot of a concurrency limit back.
--
-- KEYS[1]     the limit's holders (a set), KEYS[2] their fences (a hash), as slot_take.lua
-- ARGV[1]     the holder
-- Returns 1 if it held one, else 0.
redis.call('HDEL', KEYS[2], ARGV[1])
return redis.call('SREM', KEYS[1], ARGV[1])
