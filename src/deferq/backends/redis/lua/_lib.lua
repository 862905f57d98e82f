-- Helpers for the scripts: scripts.py prepends to each script the ones it uses (a
-- Redis script is one chunk, so this is the only way to share code). Blocks are
-- separated by blank lines, each helper defined before the helpers that use it.

-- Times are stored as text with 17 digits, which reads back as exactly the same
-- double in Python (Lua's own tostring keeps only 14).
local function fmt(seconds)
  return string.format('%.17g', seconds)
end

-- The store's clock (invariant 4): epoch seconds, the same instant as text, and in
-- integer microseconds (exact in a double). `now` is rounded once, from the integer,
-- as Python's micros / 1e6 is: both readings of a job's `ct` give the same number.
local function clock()
  local t = redis.call('TIME')
  local micros = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local now = micros / 1000000
  return now, fmt(now), micros
end

-- One command over many arguments (ZADD pairs, ZREM members), in chunks that
-- Lua's unpack can take: one call per key instead of one per job. `from`: the first
-- item to send (default 1); none left, no call.
local function call_chunked(command, key, items, from)
  for i = from or 1, #items, 1000 do
    redis.call(command, key, unpack(items, i, math.min(i + 999, #items)))
  end
end

-- Collect arguments per key for call_chunked.
local function collect(by_key, key, a, b)
  local items = by_key[key]
  if not items then
    items = {}
    by_key[key] = items
  end
  items[#items + 1] = a
  if b then items[#items + 1] = b end
end

local function flush(command, by_key)
  for key, items in pairs(by_key) do call_chunked(command, key, items) end
end

-- A number from a hash field that may have been edited by hand: never an error.
local function num(value, default)
  return tonumber(value) or default
end

-- Priority level 0 (high), 1 (normal) or 2 (low); anything else counts as normal.
local function level(value)
  local p = tonumber(value)
  if p == 0 or p == 2 then return p end
  return 1
end

-- A job's creation time as text (false when its hash is gone) from its created_at and
-- ct fields: a new hash holds ct, integer microseconds (codec.py).
local function created(created_at, created_us)
  if created_at or not created_us then return created_at end
  return fmt(tonumber(created_us) / 1000000)
end

-- The fields of a new job's hash, with its task and payload left to fill in at [2] and
-- [4] (add.lua fills them per job). Only what the readers cannot tell without it
-- (codec.py): the creation time as integer microseconds (`ct`), run_at when not then, no
-- updated_at until the job changes; priority, max_attempts and timeout only when not
-- the defaults (given as ''; a timeout of 'none' is stored as '').
local function new_hash(ct, run_s, nows, priority, max_attempts, timeout)
  local fields = {'task', false, 'payload', false, 'state', 'queued', 'ct', ct}
  if run_s ~= nows then fields[#fields + 1] = 'run_at'; fields[#fields + 1] = run_s end
  if priority ~= '' then fields[#fields + 1] = 'priority'; fields[#fields + 1] = priority end
  if max_attempts ~= '' then fields[#fields + 1] = 'max_attempts'; fields[#fields + 1] = max_attempts end
  if timeout ~= '' then fields[#fields + 1] = 'timeout'; fields[#fields + 1] = timeout == 'none' and '' or timeout end
  return fields
end

-- A plain job that add.lua stored has no hash until something touches it: its record
-- is a field of its queue's `new` hash (keys.py), "<ct>\n<task>\n<settings>\n<payload>",
-- settings being "" or "<run_at>,<priority>,<max_attempts>,<timeout>", each "" when left
-- out of a hash (new_hash; timeout 'none' = none). Its parts in that order, or nothing
-- when it was edited by hand (codec.py reads the same record).
local function record_parts(record) -- (one match: a claim reads a record per job)
  return string.match(record, '^([^\n]*)\n([^\n]*)\n([^\n]*)\n(.*)$')
end

-- `fields` (a hash's, flat) with a record's settings added as new_hash would store them.
local function with_settings(fields, settings)
  if settings == '' then return fields end
  local names, k = {'run_at', 'priority', 'max_attempts', 'timeout'}, 1
  for value in string.gmatch(settings .. ',', '([^,]*),') do
    if value ~= '' and names[k] then
      fields[#fields + 1] = names[k]
      fields[#fields + 1] = value == 'none' and '' or value
    end
    k = k + 1
  end
  return fields
end

-- A record's fields, as HGETALL of the hash new_hash would have made.
local function record_fields(record)
  local ct, task, settings, payload = record_parts(record)
  if not ct then -- edited by hand: the reader names what it cannot read (codec.py)
    return {'payload', record, 'state', 'queued'}
  end
  return with_settings({'task', task, 'payload', payload, 'state', 'queued', 'ct', ct}, settings)
end

-- The `new` hash of the queue whose job hash is `job_key` ({P:q:Q}:job:<id>).
local function new_key(job_key, id)
  return string.sub(job_key, 1, #job_key - #id - 4) .. 'new'
end

-- Give a job its hash from its record in `new`, if it has one there: for the scripts
-- that change one job by its hash (cancel, remark, watch, link).
local function materialize(job_key, id)
  local new = new_key(job_key, id)
  local record = redis.call('HGET', new, id)
  if record then
    redis.call('HSET', job_key, unpack(record_fields(record)))
    redis.call('HDEL', new, id)
  end
end

-- A job's due time as text from its run_at, created_at and ct fields: a new hash
-- leaves run_at out when the job was due at once (codec.py), at its creation.
local function due_at(run_at, created_at, created_us)
  return run_at or created(created_at, created_us)
end

-- An entry `id` of a ready list (add.lua) of the queue whose job-key prefix is `prefix`
-- ({P:q:Q}:job:), with the job's record in `new` (false when it has none): the job's due
-- time as text while the entry is the job's, else nil (a cancelled or deleted job, or one
-- back in a waiting zset: the entry is to be dropped). Without a record, the entry is
-- the job's while the job is queued and in no waiting zset: something (a remark, a
-- waiter, a link) gave it a hash while it waited in the list.
local function entry_due(prefix, id, record)
  if record then return created(false, string.match(record, '^%d+') or '0') end
  local f = redis.call('HMGET', prefix .. id, 'state', 'priority', 'run_at', 'created_at', 'ct')
  if f[1] == 'queued' and not redis.call('ZSCORE', string.sub(prefix, 1, -5) .. 'wait:' .. level(f[2]), id) then
    return due_at(f[3], f[4], f[5]) or '0'
  end
  return nil
end

-- A waiting job due later is due now (wake.lua, limit_release.lua); with `target`, only if
-- it is due then (within `slack` seconds). `first`: the KEYS index of its queue's waiting
-- zset of priority 0. Says whether it was.
local function due_now(job, id, first, now, nows, target, slack)
  local f = redis.call('HMGET', job, 'state', 'priority')
  if f[1] ~= 'queued' then return false end
  local waiting = KEYS[level(f[2]) + first]
  local due = tonumber(redis.call('ZSCORE', waiting, id) or 0)
  if due <= now or (target and math.abs(due - target) > slack) then return false end
  redis.call('ZADD', waiting, nows, id)
  redis.call('HSET', job, 'run_at', nows, 'updated_at', nows)
  return true
end

-- Leave one token in a queue's wake list, so a worker blocked on it looks again.
-- One token is enough: a worker that takes a full batch passes the token on.
local function wake(key)
  if redis.call('LLEN', key) == 0 then
    redis.call('RPUSH', key, '1')
  end
end

-- The fence of a lease (base.py): still active, same worker, same attempt. Also,
-- read in the same call: whether someone asked the job to stop (cancel.lua), its
-- unique key (false when it has none), its `notify` field (on_finish) and whether it
-- holds a durable wait's `waits_for` (which every settle but a snooze into a wait clears).
local function owned(job_key, worker, attempts)
  local f = redis.call('HMGET', job_key, 'state', 'worker', 'attempts', 'cancel_requested_at', 'key', 'notify',
    'waits_for')
  return f[1] == 'active' and f[2] == worker and tonumber(f[3]) == tonumber(attempts), f[4] ~= false, f[5], f[6],
    f[7] ~= false
end

-- Whether a job's `notify` field (false when absent) holds `letter`: c = jobs run after
-- it (link.lua), w = someone waits for it to finish (watch.lua).
local function notifies(notify, letter)
  return notify and string.find(notify, letter, 1, true) ~= nil
end

-- Add `letter` to a job's `notify` field (one field for both, so that the scripts
-- finishing a job read one field more, not two).
local function add_notify(job_key, letter)
  local notify = redis.call('HGET', job_key, 'notify') or ''
  if not string.find(notify, letter, 1, true) then redis.call('HSET', job_key, 'notify', notify .. letter) end
end

-- A job just finished, in the same script (`notify`: its field): when jobs run after
-- it, it is marked in its queue's `released` zset; when someone waits for it, a token
-- in its done list wakes them. Costs nothing for a job that has neither. The mark's score is when the sweep (recover) may take it: 5 seconds on
-- (`later`) when the caller releases the children itself right after the script, so
-- the sweep only takes over from a caller that died first; else now.
local function on_finish(job_key, id, notify, now, later)
  if not notify then return end
  local tag = string.sub(job_key, 1, #job_key - #id - 5)
  if notifies(notify, 'c') then redis.call('ZADD', tag .. ':released', later and now + 5 or now, id) end
  if notifies(notify, 'w') then
    local done = tag .. ':done:' .. id
    redis.call('RPUSH', done, '1')
    redis.call('EXPIRE', done, 60)
  end
end

-- Whether a queue is paused (pause.lua): its jobs are never leased while it is.
local function is_paused(key)
  return redis.call('EXISTS', key) == 1
end

local function unfinished(state)
  return state == 'queued' or state == 'active' or state == 'blocked'
end

-- The job waiting behind the holder of `key` (enqueue.lua) takes the key and becomes
-- claimable. For scripts whose KEYS start as enqueue.lua's: waiting zsets 1..3,
-- unique hash 4, job-key prefix 6, behind hash 7, held zset 8.
local function step_up_one(key, next_id)
  local f = redis.call('HMGET', KEYS[6] .. next_id, 'priority', 'run_at', 'created_at', 'ct')
  redis.call('HDEL', KEYS[7], key)
  redis.call('HSET', KEYS[4], key, next_id)
  redis.call('ZREM', KEYS[8], next_id)
  redis.call('ZADD', KEYS[level(f[1]) + 1], due_at(f[2], f[3], f[4]), next_id)
end

-- A due job with a fair key joins its queue's fair zset of level `p` (tag: the queue's
-- "{P:q:Q}:") at its virtual time (backends/fair.py): its key's next, or the floor when
-- that is later. The floor is the least virtual time waiting there, else the most any
-- key has reached; the key's next moves on by 1 / weight.
local function fair_place(tag, p, fair_key, weight, id)
  local zset, nexts = tag .. 'fair:' .. p, tag .. 'fairnext:' .. p
  local low = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  local floor = tonumber(low[2])
  if not floor then
    local high = redis.call('ZREVRANGE', nexts, 0, 0, 'WITHSCORES')
    floor = tonumber(high[2]) or 0
  end
  redis.call('ZREMRANGEBYSCORE', nexts, '-inf', '(' .. fmt(floor)) -- behind the floor: as good as none
  local at = tonumber(redis.call('ZSCORE', nexts, fair_key)) or floor
  if at < floor then at = floor end
  redis.call('ZADD', nexts, at + 1 / weight, fair_key)
  redis.call('ZADD', zset, at, id)
end
