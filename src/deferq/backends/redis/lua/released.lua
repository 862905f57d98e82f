-- released: a finished parent's children have heard (release.lua): their edges go.
--
-- KEYS[1]     the parent's children set ({P:q:Q}:children:<id>)
-- KEYS[2]     its queue's released zset
-- ARGV[1]     the parent's id
-- ARGV[2..]   the children that heard ("<child queue> <child id>")
-- A child linked meanwhile (link.lua) keeps the parent marked, for the next release.
-- Returns how many children are still to hear.
for i = 2, #ARGV, 1000 do
  redis.call('SREM', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
local left = redis.call('SCARD', KEYS[1])
if left == 0 then redis.call('ZREM', KEYS[2], ARGV[1]) end
return left
