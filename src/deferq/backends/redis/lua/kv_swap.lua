-- kv_swap: replace a record only while it holds the expected value (compare-and-set).
--
-- KEYS[1]     the record                    ({P:kv:NS}:r:<name>)
-- ARGV[1]     the value expected
-- ARGV[2]     the new value
-- ARGV[3]     time to live in milliseconds (0 = forever)
-- Returns 1 when replaced, 0 when the record is absent, expired or holds another value.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if tonumber(ARGV[3]) > 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
else
  redis.call('SET', KEYS[1], ARGV[2])
end
return 1
