-- heartbeat: extend the leases of jobs a worker still holds.
--
-- KEYS, 2 per job: job hash, active zset of its queue
-- ARGV[1]     lease seconds
-- ARGV, 3 per job from ARGV[2]: id, worker, attempts (the lease fence)
-- Returns one flag per job: 1 = extended, 2 = extended and someone asked the job to
-- stop (cancel.lua), 0 = lost (no longer this worker's).
local now = clock()
local lease_until = fmt(now + tonumber(ARGV[1]))
local out = {}
for i = 0, #KEYS / 2 - 1 do
  local job, active = KEYS[i * 2 + 1], KEYS[i * 2 + 2]
  local id, worker, attempts = ARGV[i * 3 + 2], ARGV[i * 3 + 3], ARGV[i * 3 + 4]
  local held, asked = owned(job, worker, attempts)
  if held then
    redis.call('HSET', job, 'lease_until', lease_until)
    redis.call('ZADD', active, lease_until, id)
    out[i + 1] = asked and 2 or 1
  else
    out[i + 1] = 0
  end
end
return out
