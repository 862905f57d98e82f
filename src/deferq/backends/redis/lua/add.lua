-- add: store plain new jobs of one queue and one priority: no unique key, no jobs to
-- run after, no expiry, no remark (enqueue.lua does those). By far the commonest
-- enqueue, so it is lean: what the jobs share comes once, then three values per job,
-- and each job is one field of the queue's `new` hash (its record, record_fields) and
-- one entry of its priority's ready list when due at once (pushed at the head, claimed
-- from the tail: first in, first out), else one member of its waiting zset: no key of
-- its own until something touches it.
--
-- KEYS[1]     the waiting zset of their priority    ({P:q:Q}:wait:N)
-- KEYS[2]     the queue's hash of new jobs' records ({P:q:Q}:new)
-- KEYS[3]     wake list                             ({P:q:Q}:wake)
-- KEYS[4]     the ready list of their priority      ({P:q:Q}:ready:N)
-- ARGV[1..5]  priority, max_attempts, timeout ('' = the default, left out of the record;
--             timeout 'none' = none), run_at (epoch seconds, 0 = now + delay), delay
-- ARGV[6..]   per job due at once (run_at and delay 0): id, the rest of its record
--             after the creation time ("\n<task>\n<settings>\n<payload>", the caller knows
--             it all); per job due later: id, task, payload (JSON [args, kwargs])
-- A call repeated after its reply was lost (its first job has a record or a hash
-- already: the script ran whole) stores nothing again.
-- Returns the jobs' creation time in integer microseconds (as text; the caller divides by
-- 1e6 as clock() does), from which it derives each job's due time exactly as stored. The
-- common path formats no number: read from TIME, the microseconds are only joined.
local t = redis.call('TIME')
local ct = t[1] .. string.sub('00000' .. t[2], -6)
local records, members, n = {}, {}, 0
local into, key
local run_at, delay = tonumber(ARGV[4]), tonumber(ARGV[5])
if run_at == 0 and delay == 0 then -- due at once: the ready list, in enqueue order
  for i = 6, #ARGV, 2 do
    local id = ARGV[i]
    records[n + n + 1] = id
    n = n + 1
    records[n + n] = ct .. ARGV[i + 1]
    members[n] = id
  end
  into, key = 'LPUSH', KEYS[4]
else
  local now = tonumber(ct) / 1000000
  local nows = fmt(now)
  local run_s = run_at ~= 0 and fmt(run_at) or fmt(now + delay)
  local settings = ''
  if run_s ~= nows or ARGV[1] .. ARGV[2] .. ARGV[3] ~= '' then
    settings = (run_s ~= nows and run_s or '') .. ',' .. ARGV[1] .. ',' .. ARGV[2] .. ',' .. ARGV[3]
  end
  local head, tail = ct .. '\n', '\n' .. settings .. '\n'
  for i = 6, #ARGV, 3 do
    local id = ARGV[i]
    records[n + 1] = id
    records[n + 2] = head .. ARGV[i + 1] .. tail .. ARGV[i + 2]
    members[n + 1] = run_s
    members[n + 2] = id
    n = n + 2
  end
  into, key = 'ZADD', KEYS[1]
end
-- The first job's record goes in only if it is not there: a repeated call finds it (or,
-- leased since, the job's own key) and stores nothing again. One command where a look
-- first would take two: a single job's call is most of its time in these commands.
if redis.call('HSETNX', KEYS[2], records[1], records[2]) == 0 then
  return string.match(redis.call('HGET', KEYS[2], records[1]), '^%d+')
end
if redis.call('EXISTS', string.sub(KEYS[2], 1, -4) .. 'job:' .. records[1]) == 1 then
  redis.call('HDEL', KEYS[2], records[1])
  return ct
end
call_chunked('HSET', KEYS[2], records, 3)
call_chunked(into, key, members)
wake(KEYS[3])
return ct
