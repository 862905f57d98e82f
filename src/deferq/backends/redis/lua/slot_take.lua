-- slot_take: a slot of a concurrency limit, if one is free.
--
-- KEYS[1]     the limit's holders ({P:slots:<scope>}, a set of "<job id>:<attempt>")
-- ARGV[1]     how many may hold a slot at once
-- ARGV[2]     the holder asking
-- ARGV[3..]   holders to drop first (their jobs no longer run: limits.py checked)
-- Returns 1 when ARGV[2] holds a slot, 0 when all are taken.
for i = 3, #ARGV do redis.call('SREM', KEYS[1], ARGV[i]) end
if redis.call('SISMEMBER', KEYS[1], ARGV[2]) == 1 then return 1 end
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('SADD', KEYS[1], ARGV[2])
return 1
