-- next_due: how long until the earliest waiting job of some queues is due.
--
-- KEYS, 10 per queue (all in one slot): waiting zsets of priority 0, 1, 2; fair zsets of
--             priority 0, 1, 2 (their jobs are all due); ready lists of priority 0, 1, 2
--             (due too); paused flag (a paused queue has nothing due)
-- ARGV        none
-- Returns seconds as text (0 or less: a job is due now), or '' when nothing waits.
local now = clock()
local earliest = nil
for q = 10, #KEYS, 10 do
  if not is_paused(KEYS[q]) then
    for k = q - 6, q - 4 do
      if redis.call('ZCARD', KEYS[k]) > 0 then earliest = now end
    end
    for k = q - 3, q - 1 do
      if redis.call('LLEN', KEYS[k]) > 0 then earliest = now end
    end
    for k = q - 9, q - 7 do
      local first = redis.call('ZRANGE', KEYS[k], 0, 0, 'WITHSCORES')
      if #first > 0 then
        local due = tonumber(first[2])
        if earliest == nil or due < earliest then earliest = due end
      end
    end
  end
end
if earliest == nil then return '' end
return fmt(earliest - now)
