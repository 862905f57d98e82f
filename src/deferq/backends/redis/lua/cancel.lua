-- cancel: cancel a waiting job, or ask an active one to stop (finished jobs are left
-- alone). An active job's worker hears it at its next heartbeat; whatever outcome
-- it then settles but success ends it cancelled (settle.lua).
--
-- KEYS[1]     job hash
-- KEYS[2..4]  waiting zsets of priority 0, 1, 2 of its queue
-- KEYS[5]     cancelled zset of its queue
-- KEYS[6]     zset of waiting jobs held back from claims
-- ARGV[1]     job id
-- Returns 1 when cancelled or asked to stop, 0 otherwise.
local now, nows = clock()
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'active' then
  if redis.call('HSETNX', KEYS[1], 'cancel_requested_at', nows) == 1 then
    redis.call('HSET', KEYS[1], 'updated_at', nows)
  end
  return 1
end
if state ~= 'queued' then return 0 end
for _, k in ipairs({2, 3, 4, 6}) do redis.call('ZREM', KEYS[k], ARGV[1]) end
redis.call('HSET', KEYS[1], 'state', 'cancelled', 'finished_at', nows, 'updated_at', nows)
redis.call('ZADD', KEYS[5], nows, ARGV[1])
return 1
