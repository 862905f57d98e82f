-- cancel: cancel a waiting or blocked job, or ask an active one to stop (finished jobs
-- are left alone). An active job's worker hears it at its next heartbeat; whatever
-- outcome it then settles but success ends it cancelled (settle.lua).
--
-- KEYS[1]     job hash
-- KEYS[2..4]  waiting zsets of priority 0, 1, 2 of its queue
-- KEYS[5]     cancelled zset of its queue
-- KEYS[6]     zset of waiting jobs held back from claims
-- KEYS[7]     blocked zset of its queue
-- KEYS[8]     its set of unfinished parents ({P:q:Q}:parents:<id>)
-- KEYS[9..11] fair zsets of priority 0, 1, 2 of its queue
-- KEYS[12]    its queue's count of cancelled entries left in its ready lists (a job in
--             no zset waits in one: reserve.lua drops the entry when it meets it)
-- ARGV[1]     job id
-- Returns 1 when cancelled or asked to stop, 2 when cancelled and jobs run after it
-- (the caller releases them: flows.py), 0 otherwise.
local now, nows = clock()
materialize(KEYS[1], ARGV[1])
local f = redis.call('HMGET', KEYS[1], 'state', 'notify', 'priority')
local state = f[1]
if state == 'active' then
  if redis.call('HSETNX', KEYS[1], 'cancel_requested_at', nows) == 1 then
    redis.call('HSET', KEYS[1], 'updated_at', nows)
  end
  return 1
end
if state == 'blocked' then
  redis.call('ZREM', KEYS[7], ARGV[1])
  redis.call('DEL', KEYS[8])
elseif state == 'queued' then
  local removed = 0
  for _, k in ipairs({2, 3, 4, 6, 9, 10, 11}) do removed = removed + redis.call('ZREM', KEYS[k], ARGV[1]) end
  if removed == 0 then redis.call('HINCRBY', KEYS[12], level(f[3]), 1) end
else
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'cancelled', 'finished_at', nows, 'updated_at', nows)
redis.call('ZADD', KEYS[5], nows, ARGV[1])
on_finish(KEYS[1], ARGV[1], f[2], now, true)
if notifies(f[2], 'c') then return 2 end
return 1
