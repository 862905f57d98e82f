-- page: the next members of one sorted set of jobs, highest score first, for a keyset
-- page (backends/redis/search.py).
--
-- KEYS[1]     the sorted set (a queue's waiting, active or finished jobs), or a ready list
-- KEYS[2]     (only with a ready list) its queue's job-key prefix: the list is read as the
--             set of its jobs scored by due time (their creation: newest at the head)
-- ARGV[1]     highest score wanted ('+inf', or a score)
-- ARGV[2]     lowest score wanted ('-inf', or '(' score): the caller drops what is below
-- ARGV[3]     the cursor's score ('' on the first page)
-- ARGV[4]     the cursor's job id
-- ARGV[5]     how many
-- ARGV[6]     '' or the queue's job key prefix: then each member's task follows its score
--             (a task filter decides here, without a round trip per job)
-- ARGV[7]     (with ARGV[6]) a task name: then only its jobs come back, after how many
--             members were looked at and the last of them (where the look stopped):
--             {looked at, last member, its score, member, score, ...}
-- Returns member, score, [task,] member, score, ...: those after the cursor (score, id) in the
-- order of the set (score, then id, both descending). A set that does not hold the
-- cursor's job gets it for a moment, to learn where it would stand: ties in score (a
-- batch enqueued at one instant) are common, and each must be listed once. Nobody sees
-- the member: a script runs alone.
local key, limit = KEYS[1], tonumber(ARGV[5])
local function task_of(id) -- from its hash, else from its record in `new` (add.lua)
  local job = ARGV[6] .. id
  local task = redis.call('HGET', job, 'task')
  if task then return task end
  local record = redis.call('HGET', new_key(job, id), id)
  return record and record_fields(record)[2]
end
local function of_task(items)
  local out = {#items / 2, items[#items - 1] or '', items[#items] or ''}
  for i = 1, #items, 2 do
    if task_of(items[i]) == ARGV[7] then
      out[#out + 1] = items[i]
      out[#out + 1] = items[i + 1]
    end
  end
  return out
end
local function with_tasks(items)
  if ARGV[6] == '' then return items end
  if (ARGV[7] or '') ~= '' then return of_task(items) end
  local out = {}
  for i = 1, #items, 2 do
    out[#out + 1] = items[i]
    out[#out + 1] = items[i + 1]
    out[#out + 1] = task_of(items[i]) or ''
  end
  return out
end
if KEYS[2] then -- a ready list: its entries stand in (due, id) order, highest first
  local prefix = KEYS[2]
  local new = string.sub(prefix, 1, -5) .. 'new'
  local n = redis.call('LLEN', key)
  local function due_of(i) -- entry i's due time (number and text) and id; nil: not a job's
    local id = redis.call('LINDEX', key, i)
    local text = id and entry_due(prefix, id, redis.call('HGET', new, id))
    if text then return tonumber(text), text, id end
  end
  local cursor, high = tonumber(ARGV[3]), tonumber(ARGV[1]) or math.huge
  local function past(i) -- whether the first job's entry from i on comes after the cursor
    while i < n do
      local due, _, id = due_of(i)
      if due then
        if cursor then return due < cursor or (due == cursor and id < ARGV[4]) end
        return due <= high
      end
      i = i + 1
    end
    return true
  end
  local lo, hi = 0, n
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if past(mid) then hi = mid else lo = mid + 1 end
  end
  local items = {}
  while lo < n and #items < limit * 2 do
    local due, text, id = due_of(lo)
    if due then
      items[#items + 1] = id
      items[#items + 1] = text
    end
    lo = lo + 1
  end
  return with_tasks(items)
end
if ARGV[3] ~= '' then
  local first = redis.call('ZREVRANK', key, ARGV[4])
  if first then
    first = first + 1
  else
    redis.call('ZADD', key, ARGV[3], ARGV[4])
    first = redis.call('ZREVRANK', key, ARGV[4])  -- where the next one stands once it is gone
    redis.call('ZREM', key, ARGV[4])
  end
  return with_tasks(redis.call('ZREVRANGE', key, first, first + limit - 1, 'WITHSCORES'))
end
return with_tasks(redis.call('ZREVRANGEBYSCORE', key, ARGV[1], ARGV[2], 'WITHSCORES', 'LIMIT', 0, limit))
