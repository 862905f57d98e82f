-- kv_expire: every live record of a namespace expires in ttl, and its index with them
-- (a job's checkpoints once it has ended: steps/checkpoints.py); names of records
-- already gone leave the index.
--
-- KEYS[1]     the namespace's index set     ({P:kv:NS}:index)
-- KEYS[2]     record-key prefix             ({P:kv:NS}:r:), records are prefix .. name
-- ARGV[1]     time to live in milliseconds
-- Returns how many records will expire.
local count = 0
for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('PEXPIRE', KEYS[2] .. name, ARGV[1]) == 1 then
    count = count + 1
  else
    redis.call('SREM', KEYS[1], name)
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return count
