-- reserve: lease up to `limit` due jobs of one or more queues to a worker.
--
-- KEYS, 12 per queue: waiting zsets of priority 0, 1, 2; active zset; wake list;
--             job-key prefix (leased jobs' hashes are prefix .. id, same slot);
--             cancelled zset; paused flag (a paused queue is passed over); ready lists of
--             priority 0, 1, 2 (add.lua); hash of cancelled entries left in those lists
-- ARGV[1]     limit
-- ARGV[2]     worker name
-- ARGV[3]     lease seconds
-- ARGV[4]     'take', or 'peek': only say which jobs would be taken (shards.py merges
--             the candidates of several servers into one order this way), or the head of
--             a durable-step namespace's kv tag ("{P:kv:deferq.steps:"): take, and bring
--             each job's checkpoints (one server only: they live in other slots)
-- ARGV[5..]   stored levels in preference order (the caller's weighted rotation, each
--             priority p as p and as its fair level p + 10: fair.claim_levels)
-- Jobs are taken by level preference, then due time (at a fair level: virtual time, from
-- the queue's fair zset, whose jobs are all due), then enqueue order (ids of equal due
-- time sort by enqueue order). At a level p, the due part of the waiting zset and the
-- ready list (its jobs are due at their creation, oldest at the tail) are merged in that
-- order. Each taken job's attempts grows by one.
-- A job add.lua stored gets its hash from its record in `new` (record_fields). A job id
-- with neither (deleted by hand) is dropped from the queue. An entry of a ready list is
-- the job's while the job has its record, or is queued and in no waiting zset (something
-- gave it a hash while it waited there); else it is dropped (a cancelled job, counted in
-- the queue's `gone` hash until then). A job
-- whose expiry has passed is not leased: it is cancelled ("expired"), its attempt not
-- counted, and left out of the answer (so fewer than `limit` may come back); jobs that
-- run after it hear of it at the next sweep (on_finish).
-- When the batch is full and due jobs remain, the wake token is passed on so that
-- another idle worker takes them.
-- Returns {now as text, lease deadline as text, then per job: queue number
-- (1-based), id, attempts, HGETALL of the job as it was before this lease, or for a
-- job add.lua stored its record, one string (the caller applies state, attempts, worker
-- and lease deadline itself); an expired job
-- the same way, its queue number negative (the caller counts it in the history);
-- bringing checkpoints, a fifth: the job's records as {name, value, ...}, or 0 for a
-- job never leased before (it has none)};
-- when peeking, {now as text, then per job: priority, due time as text, id}.
local now, nows = clock()
local limit = tonumber(ARGV[1])
local worker = ARGV[2]
local lease_until = fmt(now + tonumber(ARGV[3]))
local K = 12
local nq = #KEYS / K
local taken = {} -- the items taken, in claim order (the stream's tables: no copy per job)
local taken_level, taken_listed = {}, {} -- and per taken item: its level, whether from a ready list
local open = {}
for q = 1, nq do
  if not is_paused(KEYS[q * K - 4]) then open[#open + 1] = q end
end
local peek = ARGV[4] == 'peek'
local steps = string.sub(ARGV[4], 1, 1) == '{' and ARGV[4] or nil

-- The zset of queue q's stored level p: its waiting zset, or at a fair level its fair one
-- (named from its job-key prefix, "{P:q:Q}:job:": same slot).
local function set_of(q, p)
  if p >= 10 then return string.sub(KEYS[(q - 1) * K + 6], 1, -5) .. 'fair:' .. (p - 10) end
  return KEYS[(q - 1) * K + p + 1]
end

-- Whether queue q has any waiting zset (`fair`: any fair zset), asked once per call with
-- one EXISTS over the three: plain jobs wait in the ready lists and most queues have no
-- fair keys, so a look at each empty zset would cost a call.
local exists = {}
local function has_sets(q, fair)
  local at = fair and -q or q
  if exists[at] == nil then
    if fair then
      exists[at] = redis.call('EXISTS', set_of(q, 10), set_of(q, 11), set_of(q, 12)) > 0
    else
      exists[at] = redis.call('EXISTS', set_of(q, 0), set_of(q, 1), set_of(q, 2)) > 0
    end
  end
  return exists[at]
end

-- Queue q's due jobs of level p in its zset, in claim order: {due, id, q, due text}
-- (an item of a ready list with a record: {false, id, q, false, record} until due_of).
local function from_set(q, p, want)
  if not has_sets(q, p >= 10) then return {items = {}} end
  local zset, ids = set_of(q, p), nil
  if p >= 10 then
    ids = redis.call('ZRANGE', zset, 0, want - 1, 'WITHSCORES')
  else
    ids = redis.call('ZRANGEBYSCORE', zset, '-inf', now, 'WITHSCORES', 'LIMIT', 0, want)
  end
  local items = {}
  for j = 1, #ids, 2 do
    items[#items + 1] = {tonumber(ids[j + 1]), ids[j], q, ids[j + 1]}
  end
  return {items = items}
end

-- Queue q's ready list of level p from its tail, up to `want` jobs in claim order:
-- {due, id, q, due text (with a record: its creation time in microseconds), record},
-- and per entry looked at (oldest first) whether it is a job's (else it is dropped). A
-- record's due time is read only when a merge or a peek asks (due_of): one queue's
-- list alone, the commonest claim, never compares.
local function from_list(q, p, want)
  local b = (q - 1) * K
  local list, prefix = KEYS[b + 9 + p], KEYS[b + 6]
  local new = string.sub(prefix, 1, -5) .. 'new'
  local items, entries, seen = {}, {}, 0
  while #items < want and seen < want + 1000 do -- (a long run of dropped entries: the next call goes on)
    local ids = redis.call('LRANGE', list, -(seen + want - #items), -(seen + 1))
    if #ids == 0 then break end
    local records = redis.call('HMGET', new, unpack(ids))
    for j = #ids, 1, -1 do -- oldest first
      local id, record = ids[j], records[j]
      local item = nil
      if record then
        item = {false, id, q, false, record}
      else
        local due = entry_due(prefix, id, record)
        item = due and {tonumber(due), id, q, due, false}
      end
      entries[#entries + 1] = item ~= nil
      if item then items[#items + 1] = item end
    end
    seen = seen + #ids
  end
  return {items = items, entries = entries, list = list, level = p, gone = KEYS[b + 12]}
end

-- An item's due time (item[1]), read from its record the first time it is asked for.
local function due_of(item)
  if item[1] == false then
    local ct = string.match(item[5], '^%d+') or '0' -- (its due time as text only if peeking: ct kept in [4])
    item[1], item[4] = tonumber(ct) / 1000000, ct
  end
  return item[1]
end

local function before(a, b)
  local da, db = due_of(a), due_of(b)
  if da ~= db then return da < db end
  return a[2] < b[2]
end

local lists = {}
local left = {} -- queue number -> true: a due job was seen and not taken
for pi = 5, #ARGV do
  local p = tonumber(ARGV[pi])
  local want = limit - #taken
  if want <= 0 then break end
  local streams = {}
  for _, q in ipairs(open) do -- one job more than wanted: whether due jobs remain (below)
    local s = from_set(q, p, want + 1)
    if #s.items > 0 then streams[#streams + 1] = s end
    if p < 10 then
      s = from_list(q, p, want + 1)
      if #s.entries > 0 then
        streams[#streams + 1] = s
        lists[#lists + 1] = s
      end
    end
  end
  for _, s in ipairs(streams) do s.next = 1 end
  while #taken < limit do -- merge the streams, each in its own order
    local best = nil
    for _, s in ipairs(streams) do
      local item = s.items[s.next]
      if item and (best == nil or before(item, best.items[best.next])) then best = s end
    end
    if best == nil then break end
    local item = best.items[best.next]
    best.next = best.next + 1
    local n = #taken + 1
    taken[n], taken_level[n], taken_listed[n] = item, p, best.entries ~= nil
  end
  for _, s in ipairs(streams) do
    local item = s.items[s.next]
    if item then left[item[3]] = true end
  end
end

if peek then
  local out = {nows}
  for n, item in ipairs(taken) do
    due_of(item)
    out[#out + 1] = taken_level[n]
    out[#out + 1] = item[5] and created(false, item[4]) or item[4]
    out[#out + 1] = item[2]
  end
  return out
end

-- The ready lists lose the entries taken and those dropped before the first left.
for _, s in ipairs(lists) do
  local used, kept, dropped = s.next - 1, 0, 0
  local cut = #s.entries
  for j, mine in ipairs(s.entries) do
    if mine then
      kept = kept + 1
      if kept > used then cut = j - 1; break end
    else
      dropped = dropped + 1
    end
  end
  if cut > 0 then
    redis.call('LTRIM', s.list, 0, -cut - 1)
    if redis.call('EXISTS', s.list) == 0 then -- emptied: none of its entries is a cancelled job's
      redis.call('HDEL', s.gone, s.level)
    elseif dropped > 0 then -- the entries of cancelled jobs left the list: no longer counted
      local gone = tonumber(redis.call('HGET', s.gone, s.level)) or 0
      if gone > 0 then redis.call('HINCRBY', s.gone, s.level, -math.min(gone, dropped)) end
    end
  end
end

-- A job's live durable-step records (kv_list.lua's reading; expired names are left
-- for kv_list to drop).
local function checkpoints(tag)
  local found = {}
  for _, name in ipairs(redis.call('SMEMBERS', tag .. ':index')) do
    local value = redis.call('GET', tag .. ':r:' .. name)
    if value then
      found[#found + 1] = name
      found[#found + 1] = value
    end
  end
  return found
end

local out = {nows, lease_until}
local removed, leased, placed, recorded = {}, {}, {}, {}
local news = {} -- queue number -> its `new` hash (named from its job-key prefix: same slot)
for n, item in ipairs(taken) do
  local id, q, p, listed = item[2], item[3], taken_level[n], taken_listed[n]
  local b = (q - 1) * K
  local job = KEYS[b + 6] .. id
  local new = news[q]
  if not new then
    new = string.sub(KEYS[b + 6], 1, -5) .. 'new'
    news[q] = new
  end
  local record = item[5]
  if not listed then
    collect(removed, set_of(q, p), id)
    record = redis.call('HGET', new, id)
  end
  if record then -- a job add.lua stored: never leased, no expiry; its hash is made here
    -- with its lease from the record's fields (all but state), and the record itself is
    -- the answer (codec.py reads it: one string, not its fields)
    local ct, task, settings, payload = record_parts(record)
    if settings == '' then -- the task defaults, due at once (most jobs): no table to make
      redis.call('HSET', job, 'state', 'active', 'attempts', 1, 'worker', worker, 'lease_until', lease_until,
        'last_worker', worker, 'updated_at', nows, 'task', task, 'payload', payload, 'ct', ct)
    elseif ct then
      redis.call('HSET', job, unpack(with_settings({'state', 'active', 'attempts', 1, 'worker', worker,
        'lease_until', lease_until, 'last_worker', worker, 'updated_at', nows, 'task', task, 'payload', payload,
        'ct', ct}, settings)))
    else
      redis.call('HSET', job, 'state', 'active', 'attempts', 1, 'worker', worker, 'lease_until', lease_until,
        'last_worker', worker, 'updated_at', nows, 'payload', record)
    end
    collect(recorded, new, id)
    collect(leased, KEYS[b + 4], lease_until, id)
    local o = #out
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = q, id, 1, record
    if steps then out[#out + 1] = 0 end
  else
    local fields = redis.call('HGETALL', job)
    local attempts, expires, fresh = 0, nil, true
    for j = 1, #fields, 2 do
      local name = fields[j]
      if name == 'attempts' then attempts = num(fields[j + 1], 0)
      elseif name == 'expires_at' then expires = tonumber(fields[j + 1])
      elseif name == 'last_worker' and fields[j + 1] ~= '' then fresh = false end
    end
    if expires and expires <= now then -- never run: cancelled instead
      redis.call('HSET', job, 'state', 'cancelled', 'error', 'expired', 'finished_at', nows, 'updated_at', nows)
      collect(placed, KEYS[b + 7], nows, id)
      on_finish(job, id, redis.call('HGET', job, 'notify'), now, false) -- its children: at the next sweep
      out[#out + 1] = -q -- the history counts it: a negative queue number marks an expired job
      out[#out + 1] = id
      out[#out + 1] = 0
      out[#out + 1] = fields
      if steps then out[#out + 1] = 0 end
    elseif #fields > 0 then
      attempts = attempts + 1
      redis.call('HSET', job, 'state', 'active', 'attempts', attempts, 'worker', worker,
        'lease_until', lease_until, 'last_worker', worker, 'updated_at', nows)
      collect(leased, KEYS[b + 4], lease_until, id)
      out[#out + 1] = q
      out[#out + 1] = id
      out[#out + 1] = attempts
      out[#out + 1] = fields
      if steps then out[#out + 1] = fresh and 0 or checkpoints(steps .. id .. '}') end
    end
  end
end
flush('ZREM', removed)
flush('HDEL', recorded)
flush('ZADD', leased)
flush('ZADD', placed)

if #taken >= limit then
  for _, q in ipairs(open) do
    local b = (q - 1) * K
    if left[q] then
      wake(KEYS[b + 5])
    else
      for p = 0, 2 do
        if (has_sets(q, false) and #redis.call('ZRANGEBYSCORE', KEYS[b + p + 1], '-inf', now, 'LIMIT', 0, 1) > 0)
            or redis.call('LLEN', KEYS[b + 9 + p]) > 0
            or (has_sets(q, true) and redis.call('ZCARD', set_of(q, p + 10)) > 0) then
          wake(KEYS[b + 5])
          break
        end
      end
    end
  end
end
return out
