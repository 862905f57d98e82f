-- slot_take: a slot of a concurrency limit, if one is free, and its fence.
--
-- KEYS[1]     the limit's holders ({P:slots:<scope>}, a set of "<job id>:<attempt>")
-- KEYS[2]     their fences ({P:slots:<scope>}:fence, a hash: holder -> fence, "#" -> the last one)
-- ARGV[1]     how many may hold a slot at once
-- ARGV[2]     the holder asking
-- ARGV[3..]   holders to drop first (their jobs no longer run: limits.py checked)
-- Returns the fence of ARGV[2]'s slot, or 0 when all are taken.
for i = 3, #ARGV do
  redis.call('SREM', KEYS[1], ARGV[i])
  redis.call('HDEL', KEYS[2], ARGV[i])
end
if redis.call('SISMEMBER', KEYS[1], ARGV[2]) == 1 then
  local fence = redis.call('HGET', KEYS[2], ARGV[2])
  if fence then return tonumber(fence) end  -- else: taken before fences existed, given one now
else
  if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
  redis.call('SADD', KEYS[1], ARGV[2])
end
local fence = redis.call('HINCRBY', KEYS[2], '#', 1)
redis.call('HSET', KEYS[2], ARGV[2], fence)
return fence
