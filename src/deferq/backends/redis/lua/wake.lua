-- wake: jobs of one queue waiting for their due time are due now (a durable step's
-- event came: one call for all of an event's waiting jobs in the queue).
--
-- KEYS[1..3]  waiting zsets of priority 0, 1, 2
-- KEYS[4]     wake list
-- KEYS[5..]   job hashes, one per ARGV entry
-- ARGV        job ids
-- Returns how many were woken (a job not waiting for a due time is left alone).
local now, nows = clock()
local woken = 0
for i, id in ipairs(ARGV) do
  local job = KEYS[i + 4]
  materialize(job, id)
  local f = redis.call('HMGET', job, 'state', 'priority')
  if f[1] == 'queued' then
    local waiting = KEYS[level(f[2]) + 1]
    local due = redis.call('ZSCORE', waiting, id)
    if due and tonumber(due) > now then
      redis.call('ZADD', waiting, nows, id)
      redis.call('HSET', job, 'run_at', nows, 'updated_at', nows)
      woken = woken + 1
    end
  end
end
if woken > 0 then wake(KEYS[4]) end
return woken
