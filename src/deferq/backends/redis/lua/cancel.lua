-- cancel: cancel a waiting job (active and finished jobs are left alone).
--
-- KEYS[1]     job hash
-- KEYS[2..4]  waiting zsets of priority 0, 1, 2 of its queue
-- KEYS[5]     cancelled zset of its queue
-- ARGV[1]     job id
-- Returns 1 when cancelled, 0 otherwise.
local now, nows = clock()
if redis.call('HGET', KEYS[1], 'state') ~= 'queued' then return 0 end
for k = 2, 4 do redis.call('ZREM', KEYS[k], ARGV[1]) end
redis.call('HSET', KEYS[1], 'state', 'cancelled', 'finished_at', nows)
redis.call('ZADD', KEYS[5], nows, ARGV[1])
return 1
