-- kv_put: store a small record, optionally only if absent (first one wins).
--
-- KEYS[1]     the record                    ({P:kv:NS}:r:<name>)
-- KEYS[2]     the namespace's index set     ({P:kv:NS}:index)
-- ARGV[1]     record name (as listed in the index)
-- ARGV[2]     value
-- ARGV[3]     time to live in milliseconds (0 = forever)
-- ARGV[4]     '1' = only if absent or expired
-- Returns 1 when stored, 0 when an existing record won.
local args = {'SET', KEYS[1], ARGV[2]}
if ARGV[4] == '1' then args[#args + 1] = 'NX' end
if tonumber(ARGV[3]) > 0 then
  args[#args + 1] = 'PX'
  args[#args + 1] = ARGV[3]
end
if not redis.call(unpack(args)) then return 0 end
redis.call('SADD', KEYS[2], ARGV[1])
local left = redis.call('PTTL', KEYS[2])
if left >= 0 then  -- the namespace expires (kv_expire.lua): the index lives as long as this record
  local ttl = tonumber(ARGV[3])
  if ttl == 0 then
    redis.call('PERSIST', KEYS[2])
  elseif ttl > left then
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
end
return 1
