-- reserve: lease up to `limit` due jobs of one or more queues to a worker.
--
-- KEYS, 8 per queue: waiting zsets of priority 0, 1, 2; active zset; wake list;
--             job-key prefix (leased jobs' hashes are prefix .. id, same slot);
--             cancelled zset; paused flag (a paused queue is passed over)
-- ARGV[1]     limit
-- ARGV[2]     worker name
-- ARGV[3]     lease seconds
-- ARGV[4]     'take', or 'peek': only say which jobs would be taken (shards.py merges
--             the candidates of several servers into one order this way)
-- ARGV[5..]   stored levels in preference order (the caller's weighted rotation, each
--             priority p as p and as its fair level p + 10: fair.claim_levels)
-- Jobs are taken by level preference, then due time (at a fair level: virtual time, from
-- the queue's fair zset, whose jobs are all due), then enqueue order (ids of equal due
-- time sort by enqueue order). Each taken job's attempts grows by one.
-- A job add.lua stored gets its hash from its record in `new` (record_fields). A job id
-- with neither (deleted by hand) is dropped from the queue. A job
-- whose expiry has passed is not leased: it is cancelled ("expired"), its attempt not
-- counted, and left out of the answer (so fewer than `limit` may come back); jobs that
-- run after it hear of it at the next sweep (on_finish).
-- When the batch is full and due jobs remain, the wake token is passed on so that
-- another idle worker takes them.
-- Returns {now as text, lease deadline as text, then per job: queue number
-- (1-based), id, attempts, HGETALL of the job as it was before this lease (the
-- caller applies state, attempts, worker and lease deadline itself); an expired job
-- the same way, its queue number negative (the caller counts it in the history)};
-- when peeking, {now as text, then per job: priority, due time as text, id}.
local now, nows = clock()
local limit = tonumber(ARGV[1])
local worker = ARGV[2]
local lease_until = fmt(now + tonumber(ARGV[3]))
local nq = #KEYS / 8
local taken = {}
local open = {}
for q = 1, nq do
  if not is_paused(KEYS[q * 8]) then open[#open + 1] = q end
end

-- The zset of queue q's stored level p: its waiting zset, or at a fair level its fair one
-- (named from its job-key prefix, "{P:q:Q}:job:": same slot).
local function set_of(q, p)
  if p >= 10 then return string.sub(KEYS[(q - 1) * 8 + 6], 1, -5) .. 'fair:' .. (p - 10) end
  return KEYS[(q - 1) * 8 + p + 1]
end
local function due(zset, p, want, scores)
  if p >= 10 then
    if scores then return redis.call('ZRANGE', zset, 0, want - 1, 'WITHSCORES') end
    return redis.call('ZRANGE', zset, 0, want - 1)
  end
  if scores then return redis.call('ZRANGEBYSCORE', zset, '-inf', now, 'WITHSCORES', 'LIMIT', 0, want) end
  return redis.call('ZRANGEBYSCORE', zset, '-inf', now, 'LIMIT', 0, want)
end

local peek = ARGV[4] == 'peek'
for pi = 5, #ARGV do
  local p = tonumber(ARGV[pi])
  local want = limit - #taken
  if want <= 0 then break end
  if #open == 1 and not peek then -- one queue: its zset's order, no scores to merge by
    local q = open[1]
    local ids = due(set_of(q, p), p, want, false)
    for j = 1, #ids do
      taken[#taken + 1] = {ids[j], q, p}
    end
  else
    local found = {}
    for _, q in ipairs(open) do
      local ids = due(set_of(q, p), p, want, true)
      for j = 1, #ids, 2 do
        found[#found + 1] = {tonumber(ids[j + 1]), ids[j], q, ids[j + 1]}
      end
    end
    if nq > 1 then
      table.sort(found, function(a, b)
        if a[1] ~= b[1] then return a[1] < b[1] end
        return a[2] < b[2]
      end)
    end
    for j = 1, math.min(want, #found) do
      taken[#taken + 1] = {found[j][2], found[j][3], p, found[j][4]}
    end
  end
end

if peek then
  local out = {nows}
  for _, item in ipairs(taken) do
    out[#out + 1] = item[3]
    out[#out + 1] = item[4]
    out[#out + 1] = item[1]
  end
  return out
end

local out = {nows, lease_until}
local removed, leased, placed, recorded = {}, {}, {}, {}
for _, item in ipairs(taken) do
  local id, q, p = item[1], item[2], item[3]
  local b = (q - 1) * 8
  collect(removed, set_of(q, p), id)
  local job = KEYS[b + 6] .. id
  local new = new_key(job, id)
  local record = redis.call('HGET', new, id)
  local fields
  if record then -- a job add.lua stored: its hash is made below, with its lease
    fields = record_fields(record)
    collect(recorded, new, id)
  else
    fields = redis.call('HGETALL', job)
  end
  local attempts, expires = 0, nil
  for j = 1, #fields, 2 do
    local name = fields[j]
    if name == 'attempts' then attempts = num(fields[j + 1], 0)
    elseif name == 'expires_at' then expires = tonumber(fields[j + 1]) end
  end
  if expires and expires <= now then -- never run: cancelled instead
    redis.call('HSET', job, 'state', 'cancelled', 'error', 'expired', 'finished_at', nows, 'updated_at', nows)
    collect(placed, KEYS[b + 7], nows, id)
    on_finish(job, id, redis.call('HGET', job, 'notify'), now, false) -- its children: at the next sweep
    out[#out + 1] = -q -- the history counts it: a negative queue number marks an expired job
    out[#out + 1] = id
    out[#out + 1] = 0
    out[#out + 1] = fields
  elseif #fields > 0 then
    attempts = attempts + 1
    local lease = {'state', 'active', 'attempts', attempts, 'worker', worker,
      'lease_until', lease_until, 'last_worker', worker, 'updated_at', nows}
    if record then
      for j = 1, #fields, 2 do
        if fields[j] ~= 'state' then
          lease[#lease + 1] = fields[j]
          lease[#lease + 1] = fields[j + 1]
        end
      end
    end
    redis.call('HSET', job, unpack(lease))
    collect(leased, KEYS[b + 4], lease_until, id)
    out[#out + 1] = q
    out[#out + 1] = id
    out[#out + 1] = attempts
    out[#out + 1] = fields
  end
end
flush('ZREM', removed)
flush('HDEL', recorded)
flush('ZADD', leased)
flush('ZADD', placed)

if #taken >= limit then
  for _, q in ipairs(open) do
    local b = (q - 1) * 8
    for p = 0, 2 do
      if #redis.call('ZRANGEBYSCORE', KEYS[b + p + 1], '-inf', now, 'LIMIT', 0, 1) > 0
          or redis.call('ZCARD', set_of(q, p + 10)) > 0 then
        wake(KEYS[b + 5])
        break
      end
    end
  end
end
return out
