-- retry_dead: return a dead job to waiting, due now, with its attempts reset.
--
-- KEYS[1]     job hash
-- KEYS[2]     dead zset of its queue
-- KEYS[3..5]  waiting zsets of priority 0, 1, 2
-- KEYS[6]     unique-key index hash
-- KEYS[7]     wake list
-- KEYS[8]     job-key prefix (the holder of its unique key is prefix .. id)
-- ARGV[1]     job id
-- Refused (0) when the job is not dead, or its unique key is held by another
-- unfinished job. Returns 1 when done.
local now, nows = clock()
local id = ARGV[1]
local f = redis.call('HMGET', KEYS[1], 'state', 'key', 'priority')
if f[1] ~= 'dead' then return 0 end
local key = f[2]
if key then
  local holder = redis.call('HGET', KEYS[6], key)
  if holder and holder ~= id and unfinished(redis.call('HGET', KEYS[8] .. holder, 'state')) then
    return 0
  end
  redis.call('HSET', KEYS[6], key, id)
end
redis.call('ZREM', KEYS[2], id)
redis.call('HDEL', KEYS[1], 'finished_at')
redis.call('HSET', KEYS[1], 'state', 'queued', 'attempts', '0', 'run_at', nows, 'updated_at', nows)
redis.call('ZADD', KEYS[level(f[3]) + 3], nows, id)
wake(KEYS[7])
return 1
