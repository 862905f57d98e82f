-- add: store plain new jobs of one queue and one priority: no unique key, no jobs to
-- run after, no expiry, no remark (enqueue.lua does those). By far the commonest
-- enqueue, so it is lean: what the jobs share comes once, then three values per job.
--
-- KEYS[1]     the waiting zset of their priority    ({P:q:Q}:wait:N)
-- KEYS[2]     job-key prefix ({P:q:Q}:job:): a job's hash is KEYS[2] .. its id
-- KEYS[3]     wake list                             ({P:q:Q}:wake)
-- ARGV[1..5]  priority, max_attempts, timeout ('' = the default, left out of the hash;
--             timeout 'none' = none), run_at (epoch seconds, 0 = now + delay), delay
-- ARGV[6..]   id, task, payload (JSON [args, kwargs]) of each job
-- Returns now as text: each job's creation time, from which the caller derives its
-- due time exactly as stored.
local now, nows, micros = clock()
local run_s = nows
local run_at, delay = tonumber(ARGV[4]), tonumber(ARGV[5])
if run_at ~= 0 then
  run_s = fmt(run_at)
elseif delay ~= 0 then
  run_s = fmt(now + delay)
end
local fields = new_hash(string.format('%.0f', micros), run_s, nows, ARGV[1], ARGV[2], ARGV[3])
local prefix, members = KEYS[2], {}
for i = 6, #ARGV, 3 do
  fields[2], fields[4] = ARGV[i + 1], ARGV[i + 2]
  redis.call('HSET', prefix .. ARGV[i], unpack(fields))
  members[#members + 1] = run_s
  members[#members + 1] = ARGV[i]
end
call_chunked('ZADD', KEYS[1], members)
wake(KEYS[3])
return nows
