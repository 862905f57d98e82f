-- stats: counts by state of one queue, and how long its oldest due job has waited.
--
-- KEYS[1..3]  waiting zsets of priority 0, 1, 2
-- KEYS[4]     active zset
-- KEYS[5..7]  succeeded, dead, cancelled zsets
-- KEYS[8]     zset of waiting jobs held back from claims (counted as waiting)
-- KEYS[9]     blocked zset
-- KEYS[10..12] fair zsets of priority 0, 1, 2 (their jobs are all due: queued)
-- ARGV        none
-- Returns {scheduled, queued, active, succeeded, dead, cancelled, oldest wait as text,
-- blocked}.
local now, nows = clock()
local scheduled, queued, oldest = 0, 0, 0
for k = 10, 12 do queued = queued + redis.call('ZCARD', KEYS[k]) end -- fair zsets: all due
for _, k in ipairs({1, 2, 3, 8}) do
  local due = redis.call('ZCOUNT', KEYS[k], '-inf', nows)
  queued = queued + due
  scheduled = scheduled + redis.call('ZCARD', KEYS[k]) - due
  if due > 0 then
    local first = redis.call('ZRANGE', KEYS[k], 0, 0, 'WITHSCORES')
    oldest = math.max(oldest, now - tonumber(first[2]))
  end
end
return {scheduled, queued, redis.call('ZCARD', KEYS[4]), redis.call('ZCARD', KEYS[5]),
  redis.call('ZCARD', KEYS[6]), redis.call('ZCARD', KEYS[7]), fmt(oldest), redis.call('ZCARD', KEYS[9])}
