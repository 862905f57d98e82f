-- stats: counts by state of one queue, and how long its oldest due job has waited.
--
-- KEYS[1..3]  waiting zsets of priority 0, 1, 2
-- KEYS[4]     active zset
-- KEYS[5..7]  succeeded, dead, cancelled zsets
-- KEYS[8]     zset of waiting jobs held back from claims (counted as waiting)
-- KEYS[9]     blocked zset
-- KEYS[10..12] fair zsets of priority 0, 1, 2 (their jobs are all due: queued)
-- KEYS[13..15] ready lists of priority 0, 1, 2 (add.lua: due at their creation)
-- KEYS[16]    how many entries of those lists are of cancelled jobs (not counted)
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
local new = string.sub(KEYS[16], 1, -5) .. 'new'
for p = 0, 2 do
  local list = KEYS[13 + p]
  local n = redis.call('LLEN', list)
  if n > 0 then
    queued = queued + math.max(0, n - (tonumber(redis.call('HGET', KEYS[16], p)) or 0))
    local tail = redis.call('LRANGE', list, -10, -1)
    for j = #tail, 1, -1 do -- the oldest first (a cancelled one has no record)
      local record = redis.call('HGET', new, tail[j])
      if record then
        oldest = math.max(oldest, now - tonumber(created(false, string.match(record, '^%d+') or '0')))
        break
      end
    end
  end
end
return {scheduled, queued, redis.call('ZCARD', KEYS[4]), redis.call('ZCARD', KEYS[5]),
  redis.call('ZCARD', KEYS[6]), redis.call('ZCARD', KEYS[7]), fmt(oldest), redis.call('ZCARD', KEYS[9])}
