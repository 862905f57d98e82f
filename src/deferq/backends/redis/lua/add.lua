-- add: store plain new jobs of one queue and one priority: no unique key, no jobs to
-- run after, no expiry, no remark (enqueue.lua does those). By far the commonest
-- enqueue, so it is lean: what the jobs share comes once, then three values per job,
-- and each job is one field of the queue's `new` hash (its record, record_fields) and
-- one member of a waiting zset: no key of its own until something touches it (a
-- third of the memory of a hash per job, and one HSET per batch).
--
-- KEYS[1]     the waiting zset of their priority    ({P:q:Q}:wait:N)
-- KEYS[2]     the queue's hash of new jobs' records ({P:q:Q}:new)
-- KEYS[3]     wake list                             ({P:q:Q}:wake)
-- ARGV[1..5]  priority, max_attempts, timeout ('' = the default, left out of the record;
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
local settings = ''
if run_s ~= nows or ARGV[1] .. ARGV[2] .. ARGV[3] ~= '' then
  settings = (run_s ~= nows and run_s or '') .. ',' .. ARGV[1] .. ',' .. ARGV[2] .. ',' .. ARGV[3]
end
local head = string.format('%.0f', micros) .. '\n'
local tail = '\n' .. settings .. '\n'
local records, members = {}, {}
for i = 6, #ARGV, 3 do
  records[#records + 1] = ARGV[i]
  records[#records + 1] = head .. ARGV[i + 1] .. tail .. ARGV[i + 2]
  members[#members + 1] = run_s
  members[#members + 1] = ARGV[i]
end
call_chunked('HSET', KEYS[2], records)
call_chunked('ZADD', KEYS[1], members)
wake(KEYS[3])
return nows
