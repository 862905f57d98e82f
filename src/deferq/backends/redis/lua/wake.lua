-- wake: a job waiting for its due time is due now (a durable step's event came).
--
-- KEYS[1]     job hash
-- KEYS[2..4]  waiting zsets of priority 0, 1, 2
-- KEYS[5]     wake list
-- ARGV[1]     job id
-- Returns 1 when done, 0 when the job is not waiting for a due time.
local now, nows = clock()
local id = ARGV[1]
materialize(KEYS[1], id)
local f = redis.call('HMGET', KEYS[1], 'state', 'priority')
if f[1] ~= 'queued' then return 0 end
local waiting = KEYS[level(f[2]) + 2]
local due = redis.call('ZSCORE', waiting, id)
if not due or tonumber(due) <= now then return 0 end
redis.call('ZADD', waiting, nows, id)
redis.call('HSET', KEYS[1], 'run_at', nows, 'updated_at', nows)
wake(KEYS[5])
return 1
