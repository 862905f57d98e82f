-- kv_put_leased: a leased job's own record (a durable step's checkpoint), stored only
-- while the job is still this attempt's (fenced as heartbeat.lua is, its lease not
-- extended), unless a record is there. One server only: the job's keys and the
-- record's are in different slots (a cluster runs heartbeat.lua, then kv_put.lua).
--
-- KEYS[1]     job hash                      ({P:q:Q}:job:<id>)
-- KEYS[2]     the record                    ({P:kv:NS}:r:<name>)
-- KEYS[3]     the namespace's index set     ({P:kv:NS}:index)
-- ARGV[1..2]  worker, attempts (the lease fence)
-- ARGV[3]     record name (as listed in the index)
-- ARGV[4]     value
-- Returns {0} when the lease was lost, {1} when the record was stored, {1, kept}
-- when a record was there already (kept: its value).
if not owned(KEYS[1], ARGV[1], ARGV[2]) then return {0} end
if not redis.call('SET', KEYS[2], ARGV[4], 'NX') then return {1, redis.call('GET', KEYS[2])} end
redis.call('SADD', KEYS[3], ARGV[3])
if redis.call('PTTL', KEYS[3]) >= 0 then redis.call('PERSIST', KEYS[3]) end  -- kv_put.lua: lives as long as this record
return {1}
