-- run_now: make a scheduled job (waiting, due later) due now; its attempts are kept.
--
-- KEYS[1]     job hash
-- KEYS[2..4]  waiting zsets of priority 0, 1, 2
-- KEYS[5]     wake list
-- ARGV[1]     job id
-- Returns 1 when done, 0 when the job is not waiting or already due.
local now, nows = clock()
local id = ARGV[1]
materialize(KEYS[1], id)
local f = redis.call('HMGET', KEYS[1], 'state', 'priority', 'run_at')
if f[1] ~= 'queued' or not f[3] or tonumber(f[3]) <= now then return 0 end
local waiting = KEYS[level(f[2]) + 2]
if not redis.call('ZSCORE', waiting, id) then return 0 end
redis.call('HSET', KEYS[1], 'run_at', nows, 'updated_at', nows)
redis.call('ZADD', waiting, nows, id)
wake(KEYS[5])
return 1
