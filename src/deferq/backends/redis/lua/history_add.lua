-- history_add: add to the per-minute history counters (deferq/observe/history.py).
--
-- KEYS[1]     the history key prefix ({P:history}:); every key below shares its slot
-- ARGV[1]     seconds to keep what is written (the retention, from the last write)
-- ARGV[2..]   groups: minute, queue, task, N, then N (field, amount) pairs
--
-- Per minute: a set of "queue\ntask" names ({P:history}:m:<minute>) and, per name, a
-- hash of counters ({P:history}:c:<minute>:<queue>\n<task>). Both expire.
local prefix, ttl = KEYS[1], ARGV[1]
local i = 2
while i <= #ARGV do
  local minute, name, n = ARGV[i], ARGV[i + 1] .. '\n' .. ARGV[i + 2], tonumber(ARGV[i + 3])
  local cell = prefix .. 'c:' .. minute .. ':' .. name
  i = i + 4
  for j = i, i + 2 * n - 1, 2 do
    redis.call('HINCRBY', cell, ARGV[j], ARGV[j + 1])
  end
  i = i + 2 * n
  redis.call('EXPIRE', cell, ttl)
  local index = prefix .. 'm:' .. minute
  redis.call('SADD', index, name)
  redis.call('EXPIRE', index, ttl)
end
return 1
