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
-- The due time is run_at, else now + delay, computed from `now` as returned, so
-- the caller derives exactly the stored value without reading it back.
-- Returns {now as text, one entry per item}: 0 when the item was stored, or
-- {id, HGETALL...} of the unfinished job that holds its unique key.
local now, nows = clock()
now = tonumber(nows)
local out = {nows}
local adds = {}
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
    out[i + 2] = {holder, redis.call('HGETALL', KEYS[6] .. holder)}
  else
    local run_s = nows
    local run_at, delay = tonumber(ARGV[b + 8]), tonumber(ARGV[b + 9])
    if run_at ~= 0 then
      run_s = fmt(run_at)
    elseif delay ~= 0 then
      run_s = fmt(now + delay)
    end
    local job = KEYS[7 + i]
    redis.call('HSET', job, 'task', ARGV[b + 2], 'payload', ARGV[b + 3],
      'priority', ARGV[b + 4], 'state', 'queued', 'max_attempts', ARGV[b + 5],
      'timeout', ARGV[b + 6], 'run_at', run_s, 'created_at', nows)
    if key ~= '' then
      redis.call('HSET', job, 'key', key)
      redis.call('HSET', KEYS[4], key, id)
    end
    collect(adds, KEYS[level(ARGV[b + 4]) + 1], run_s, id)
    stored = true
    out[i + 2] = 0
  end
end
flush('ZADD', adds)
if stored then wake(KEYS[5]) end
return out
