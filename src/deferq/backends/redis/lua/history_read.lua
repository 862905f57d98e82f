-- history_read: the history counters of minutes [first, end), summed over the queues
-- and tasks that match (deferq/observe/history.py).
--
-- KEYS[1]     the history key prefix ({P:history}:)
-- ARGV[1]     first minute
-- ARGV[2]     end minute (not included)
-- ARGV[3]     queue, '' for every queue
-- ARGV[4]     task, '' for every task
-- Returns a flat list: minute, field, amount, ...
local prefix = KEYS[1]
local queue, task = ARGV[3], ARGV[4]
local out = {}
for minute = tonumber(ARGV[1]), tonumber(ARGV[2]) - 1 do
  local sums, fields = {}, {}
  for _, name in ipairs(redis.call('SMEMBERS', prefix .. 'm:' .. minute)) do
    local cut = string.find(name, '\n', 1, true)
    if (queue == '' or string.sub(name, 1, cut - 1) == queue)
        and (task == '' or string.sub(name, cut + 1) == task) then
      local counters = redis.call('HGETALL', prefix .. 'c:' .. minute .. ':' .. name)
      for k = 1, #counters, 2 do
        local field = counters[k]
        if not sums[field] then fields[#fields + 1] = field end
        sums[field] = (sums[field] or 0) + tonumber(counters[k + 1])
      end
    end
  end
  for _, field in ipairs(fields) do
    out[#out + 1] = minute
    out[#out + 1] = field
    out[#out + 1] = sums[field]
  end
end
return out
