-- enqueue: store new jobs of one queue (enqueue_many), honouring unique keys.
--
-- KEYS[1..3]  waiting zsets of priority 0, 1, 2      ({P:q:Q}:wait:N)
-- KEYS[4]     unique-key index hash                  ({P:q:Q}:unique)
-- KEYS[5]     wake list                              ({P:q:Q}:wake)
-- KEYS[6]     job-key prefix ({P:q:Q}:job:); a key held by an unfinished job is
--             checked at KEYS[6] .. <id of that job>
-- KEYS[6+i]   job hash of item i                     ({P:q:Q}:job:<id>)
-- ARGV, 9 per item: id, task, payload (JSON [args, kwargs]), priority (0|1|2),
--             max_attempts, timeout ('' = none), unique key ('' = none),
--             run_at (epoch seconds, 0 = now + delay), delay (seconds)
-- Returns {now as text, one entry per item}: the item's stored
-- due time as text when it was stored, or {id, HGETALL...} of the unfinished job
-- that holds its key.
local now, nows = clock()
local out = {}
local stored = false
for i = 0, #ARGV / 9 - 1 do
  local b = i * 9
  local id, key = ARGV[b + 1], ARGV[b + 7]
  local holder = nil
  if key ~= '' then
    local other = redis.call('HGET', KEYS[4], key)
    if other and unfinished(redis.call('HGET', KEYS[6] .. other, 'state')) then
      holder = other
    end
  end
  if holder then
    out[i + 1] = {holder, redis.call('HGETALL', KEYS[6] .. holder)}
  else
    local run_at = tonumber(ARGV[b + 8])
    if run_at == 0 then run_at = now + tonumber(ARGV[b + 9]) end
    local run_s = fmt(run_at)
    local job = KEYS[6 + i + 1]
    redis.call('HSET', job, 'task', ARGV[b + 2], 'payload', ARGV[b + 3],
      'priority', ARGV[b + 4], 'state', 'queued', 'attempts', '0',
      'max_attempts', ARGV[b + 5], 'timeout', ARGV[b + 6], 'run_at', run_s,
      'created_at', nows)
    if key ~= '' then
      redis.call('HSET', job, 'key', key)
      redis.call('HSET', KEYS[4], key, id)
    end
    redis.call('ZADD', KEYS[level(ARGV[b + 4]) + 1], run_s, id)
    out[i + 1] = run_s
    stored = true
  end
end
if stored then wake(KEYS[5]) end
table.insert(out, 1, nows)
return out
