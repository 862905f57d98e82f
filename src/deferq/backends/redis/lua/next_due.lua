-- next_due: how long until the earliest waiting job of some queues is due.
--
-- KEYS        waiting zsets (any number, all in one slot)
-- ARGV        none
-- Returns seconds as text (0 or less: a job is due now), or '' when nothing waits.
local now = clock()
local earliest = nil
for _, key in ipairs(KEYS) do
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first > 0 then
    local due = tonumber(first[2])
    if earliest == nil or due < earliest then earliest = due end
  end
end
if earliest == nil then return '' end
return fmt(earliest - now)
