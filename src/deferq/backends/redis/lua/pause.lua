-- pause: pause or resume one queue. A paused queue takes enqueues, but reserve.lua
-- leases none of its jobs and next_due.lua reports none due, until it is resumed.
--
-- KEYS[1]     the queue's paused flag ({P:q:Q}:paused; its value: when it was paused)
-- KEYS[2]     the queue's wake list (a resume wakes idle workers at once)
-- ARGV[1]     'pause' or 'resume'
-- Returns 1 when the queue changed, 0 when it already was so.
local _, nows = clock()
if ARGV[1] == 'pause' then
  return redis.call('SETNX', KEYS[1], nows)
end
local changed = redis.call('DEL', KEYS[1])
if changed == 1 then wake(KEYS[2]) end
return changed
