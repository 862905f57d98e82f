-- slot_holders: who holds the slots of a concurrency limit, and their fences.
--
-- KEYS[1]     the limit's holders (a set), KEYS[2] their fences (a hash), as slot_take.lua
-- Returns holder, fence, holder, fence, ... (fence 0: taken before fences existed).
local out = {}
for _, holder in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  out[#out + 1] = holder
  out[#out + 1] = tonumber(redis.call('HGET', KEYS[2], holder) or '0')
end
return out
