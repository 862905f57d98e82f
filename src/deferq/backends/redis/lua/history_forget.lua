-- history_forget: delete one queue's history counters of minutes [first, end)
-- (`deferq bench` removes what its own queue counted).
--
-- KEYS[1]     the history key prefix ({P:history}:)
-- ARGV[1]     first minute
-- ARGV[2]     end minute (not included)
-- ARGV[3]     queue
-- Returns the number of counter hashes deleted.
local prefix, queue = KEYS[1], ARGV[3]
local deleted = 0
for minute = tonumber(ARGV[1]), tonumber(ARGV[2]) - 1 do
  local names = prefix .. 'm:' .. minute
  for _, name in ipairs(redis.call('SMEMBERS', names)) do
    if string.sub(name, 1, #queue + 1) == queue .. '\n' then
      redis.call('SREM', names, name)
      deleted = deleted + redis.call('DEL', prefix .. 'c:' .. minute .. ':' .. name)
    end
  end
end
return deleted
