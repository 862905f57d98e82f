-- kv_put_leased: a leased job's own record (a durable step's checkpoint), kept only
-- while the job's lease holds: the lease renewed as heartbeat.lua does, then the
-- record stored unless one is there. One server only: the job's keys and the record's
-- are in different slots (a cluster runs heartbeat.lua, then kv_put.lua).
--
-- KEYS[1]     job hash                      ({P:q:Q}:job:<id>)
-- KEYS[2]     active zset of its queue      ({P:q:Q}:active)
-- KEYS[3]     the record                    ({P:kv:NS}:r:<name>)
-- KEYS[4]     the namespace's index set     ({P:kv:NS}:index)
-- ARGV[1]     lease seconds
-- ARGV[2..4]  id, worker, attempts (the lease fence)
-- ARGV[5]     record name (as listed in the index)
-- ARGV[6]     value
-- Returns {0} when the lease was lost, {1} when the record was stored, {1, kept}
-- when a record was there already (kept: its value).
if not owned(KEYS[1], ARGV[3], ARGV[4]) then return {0} end
local lease_until = fmt(clock() + tonumber(ARGV[1]))
redis.call('HSET', KEYS[1], 'lease_until', lease_until)
redis.call('ZADD', KEYS[2], lease_until, ARGV[2])
if not redis.call('SET', KEYS[3], ARGV[6], 'NX') then return {1, redis.call('GET', KEYS[3])} end
redis.call('SADD', KEYS[4], ARGV[5])
if redis.call('PTTL', KEYS[4]) >= 0 then redis.call('PERSIST', KEYS[4]) end  -- kv_put.lua: lives as long as this record
return {1}
