-- recover: return jobs of one queue whose lease expired to waiting, or to dead when
-- their attempts are used up (a job that kills its worker every time must end), or
-- to cancelled when someone asked them to stop.
--
-- KEYS[1..3]  waiting zsets of priority 0, 1, 2
-- KEYS[4]     active zset (score = lease deadline)
-- KEYS[5]     dead zset
-- KEYS[6]     wake list
-- KEYS[7]     job-key prefix (expired jobs' hashes are prefix .. id, same slot)
-- KEYS[8]     cancelled zset
-- ARGV[1]     at most this many jobs per call (the caller repeats while it is reached)
-- A recovered job keeps its due time, so it runs before jobs that became due later.
-- A job that ends here is marked for its children's release, due at once: the sweep
-- that runs this script releases them next (on_finish).
-- Returns {the number of jobs recovered, {new state, task, new state, task, ...}}
-- (the caller counts them in the history).
local now, nows = clock()
local ids = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. nows, 'LIMIT', 0, tonumber(ARGV[1]))
local requeued = false
local ended = {} -- for the history
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[4], id)
  local job = KEYS[7] .. id
  local f = redis.call('HMGET', job, 'state', 'attempts', 'max_attempts', 'priority', 'worker', 'run_at',
    'cancel_requested_at', 'notify')
  if f[1] == 'active' then
    local err = 'lease expired (worker ' .. (f[5] or '?') .. ' stopped heartbeating)'
    redis.call('HDEL', job, 'worker', 'lease_until')
    redis.call('HSET', job, 'updated_at', nows)
    if f[7] then
      redis.call('HSET', job, 'state', 'cancelled', 'error', err, 'finished_at', nows)
      redis.call('ZADD', KEYS[8], nows, id)
      on_finish(job, id, f[8], now, false)
    elseif num(f[2], 0) >= num(f[3], 1) then
      redis.call('HSET', job, 'state', 'dead', 'error', err, 'finished_at', nows)
      redis.call('ZADD', KEYS[5], nows, id)
      on_finish(job, id, f[8], now, false)
    else
      redis.call('HSET', job, 'state', 'queued', 'error', err)
      redis.call('ZADD', KEYS[level(f[4]) + 1], fmt(num(f[6], now)), id)
      requeued = true
    end
    ended[#ended + 1] = redis.call('HGET', job, 'state') -- for the history: what it became,
    ended[#ended + 1] = redis.call('HGET', job, 'task') or '' -- and its task
  end
end
if requeued then wake(KEYS[6]) end
return {#ids, ended}
