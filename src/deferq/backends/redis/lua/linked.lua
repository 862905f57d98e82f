-- linked: jobs stored blocked (enqueue.lua) have all their links (link.lua): they leave
-- their queues' `linking` sets, which the sweep reads for producers that died first.
--
-- KEYS        the `linking` zsets of one or more queues ({P:q:Q}:linking)
-- ARGV        per key: how many ids, then the ids
-- Returns nothing.
local at = 1
for _, key in ipairs(KEYS) do
  local n = tonumber(ARGV[at])
  for i = at + 1, at + n, 1000 do
    redis.call('ZREM', key, unpack(ARGV, i, math.min(i + 999, at + n)))
  end
  at = at + n + 1
end
return 0
