-- rerun: queue a finished job (succeeded, dead or cancelled) again, due now, with its
-- attempts reset and its result and cancel request cleared (a durable job retried from
-- one of its steps: steps/retry.py); with ARGV[2] 'dead', a dead job only (retry_dead).
--
-- KEYS[1]     job hash
-- KEYS[2..4]  succeeded, dead and cancelled zsets of its queue
-- KEYS[5..7]  waiting zsets of priority 0, 1, 2
-- KEYS[8]     unique-key index hash
-- KEYS[9]     wake list
-- KEYS[10]    job-key prefix (the holder of its unique key is prefix .. id)
-- ARGV[1]     job id
-- ARGV[2]     'dead': only a dead job; '' any finished one
-- Refused (0) when the job is not finished (or not dead, as asked), or its unique key is held by another
-- unfinished job. Returns 1 when done.
local now, nows = clock()
local id = ARGV[1]
local f = redis.call('HMGET', KEYS[1], 'state', 'key', 'priority')
local finished = {succeeded = 2, dead = 3, cancelled = 4}
local from = finished[f[1] or '']
if not from or (ARGV[2] == 'dead' and f[1] ~= 'dead') then return 0 end
local key = f[2]
if key then
  local holder = redis.call('HGET', KEYS[8], key)
  if holder and holder ~= id and unfinished(redis.call('HGET', KEYS[10] .. holder, 'state')) then
    return 0
  end
  redis.call('HSET', KEYS[8], key, id)
end
redis.call('ZREM', KEYS[from], id)
redis.call('HDEL', KEYS[1], 'finished_at', 'result', 'cancel_requested_at', 'waits_for')
redis.call('HSET', KEYS[1], 'state', 'queued', 'attempts', '0', 'run_at', nows, 'updated_at', nows)
redis.call('ZADD', KEYS[level(f[3]) + 5], nows, id)
wake(KEYS[9])
return 1
