-- remark: set or clear the free-text remark of a job, in any state.
--
-- KEYS[1]     job hash
-- ARGV[1]     the remark ('' = clear it)
-- ARGV[2]     job id
-- Returns 1 when the job exists, 0 otherwise.
local _, nows = clock()
materialize(KEYS[1], ARGV[2])
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[1] == '' then
  redis.call('HDEL', KEYS[1], 'remark')
else
  redis.call('HSET', KEYS[1], 'remark', ARGV[1])
end
redis.call('HSET', KEYS[1], 'updated_at', nows)
return 1
