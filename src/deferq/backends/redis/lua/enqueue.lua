-- enqueue: store new jobs of one queue (enqueue_many), honouring unique keys.
--
-- KEYS[1..3]  waiting zsets of priority 0, 1, 2      ({P:q:Q}:wait:N)
-- KEYS[4]     unique-key index hash                  ({P:q:Q}:unique)
-- KEYS[5]     wake list                              ({P:q:Q}:wake)
-- KEYS[6]     job-key prefix ({P:q:Q}:job:); a key held by an unfinished job is
--             checked at KEYS[6] .. <id of that job>
-- KEYS[7]     key -> job waiting behind its running holder ({P:q:Q}:behind)
-- KEYS[8]     zset of waiting jobs held back from claims ({P:q:Q}:held)
-- KEYS[8+i]   job hash of item i                     ({P:q:Q}:job:<id>)
-- ARGV, 17 per item: id, task, payload (JSON [args, kwargs]), priority (0|1|2),
--             max_attempts, timeout ('none' = none), unique key ('' = none),
--             run_at (epoch seconds, 0 = now + delay), delay (seconds),
--             expiry ('' = none, '@' .. epoch seconds, or '+' .. seconds from now),
--             on_conflict (ignore | replace | debounce), max_wait ('' = none),
--             remark ('' = none), tags (a JSON array, '' = none), fair key ('' = none),
--             fair weight, unique_for (seconds, '' = none); priority, max_attempts and
--             timeout are '' when they
--             are the defaults the readers know (codec.py): left out of the hash.
-- then, only for items that run after other jobs (options.after): item number (1-based),
--             'all' or 'any' (after_any), how many parent ids, the parent ids.
--             Such an item is stored BLOCKED: in the queue's blocked zset, with its
--             parents in {P:q:Q}:parents:<id>, and in the queue's linking zset (due for
--             the sweep 10 s on) until the caller has linked it (flows.py).
-- A job due at once without a unique key, fair key or parents waits in its priority's
-- ready list ({P:q:Q}:ready:N, named from the job-key prefix), as add.lua's: an item
-- whose hash exists already is then not stored again (the same call run again).
-- The due time is run_at, else now + delay, computed from `now` as returned, so
-- the caller derives exactly the stored value without reading it back.
-- A key held by an unfinished job: `ignore` answers with the job that will run next
-- (the one waiting behind a running holder, else the holder); `replace` and
-- `debounce` give that job, if it waits, the item's payload and due time (debounce:
-- at most max_wait after it was stored); a running holder is never changed: the item
-- is stored to wait behind it, held back from claims until step_up.lua.
-- A free key whose newest job succeeded within the item's unique_for answers with that
-- job (the deduplication window, checked here so that racing producers make none).
-- Returns {now as text, one entry per item}: 0 when the item was stored, or
-- {id, HGETALL...} of the job that answers for it.
local STRIDE = 17 -- ARGV values per item (codec.ENQUEUE_STRIDE)
local now, nows, micros = clock()
local micros_s = string.format('%.0f', micros)
now = tonumber(nows)
local out = {nows}
local adds = {}
local stored = false
local function state_of(id)
  if not id then return nil end
  return redis.call('HGET', KEYS[6] .. id, 'state')
end
local items = #KEYS - 8
local links = nil -- item number -> ARGV position of its 'all' | 'any'
if #ARGV > items * STRIDE then
  links = {}
  local at = items * STRIDE + 1
  while at < #ARGV do
    links[tonumber(ARGV[at])] = at + 1
    at = at + 3 + tonumber(ARGV[at + 2])
  end
end
local tag = string.sub(KEYS[6], 1, -5)
local pushes = {}
-- Whether item i, once stored, waits in its priority's ready list (as add.lua's jobs due
-- at once): due at once, without a unique key (a holder's replace moves its due time in
-- its zset), a fair key or jobs to run after.
local function listed(i)
  local b = i * STRIDE
  return ARGV[b + 7] == '' and ARGV[b + 15] == '' and tonumber(ARGV[b + 8]) == 0 and tonumber(ARGV[b + 9]) == 0
    and not (links and links[i + 1])
end
for i = 0, items - 1 do
  local b = i * STRIDE
  local id, key, mode = ARGV[b + 1], ARGV[b + 7], ARGV[b + 11]
  local holder, behind, recent = nil, nil, nil
  if key ~= '' then
    holder = redis.call('HGET', KEYS[4], key)
    if holder and ARGV[b + 17] ~= '' then -- the window: the newest job, if it succeeded in it
      local f = redis.call('HMGET', KEYS[6] .. holder, 'state', 'finished_at')
      if f[1] == 'succeeded' and tonumber(f[2] or '') and tonumber(f[2]) >= now - tonumber(ARGV[b + 17]) then
        recent = holder
      end
    end
    if not unfinished(state_of(holder)) then holder = nil end
    behind = redis.call('HGET', KEYS[7], key)
    if state_of(behind) ~= 'queued' then behind = nil end
    if behind and not holder then -- its holder is gone: it holds the key now
      step_up_one(key, behind)
      holder, behind = behind, nil
      stored = true
    end
  end
  local run_s = nows
  local run_at, delay = tonumber(ARGV[b + 8]), tonumber(ARGV[b + 9])
  if run_at ~= 0 then
    run_s = fmt(run_at)
  elseif delay ~= 0 then
    run_s = fmt(now + delay)
  end
  local target = behind
  if not target and holder and state_of(holder) == 'queued' then target = holder end
  if recent and not holder and not behind then
    out[i + 2] = {recent, redis.call('HGETALL', KEYS[6] .. recent)}
  elseif (holder or behind) and (mode == 'ignore' or target) then
    local answer = behind or holder
    if mode ~= 'ignore' then -- replace / debounce: the waiting job takes payload and due time
      answer = target
      local job = KEYS[6] .. target
      if mode == 'debounce' and ARGV[b + 12] ~= '' then
        local f = redis.call('HMGET', job, 'created_at', 'ct')
        local latest = num(created(f[1], f[2]), now) + tonumber(ARGV[b + 12])
        run_s = fmt(math.min(tonumber(run_s), math.max(latest, now)))
      end
      redis.call('HSET', job, 'payload', ARGV[b + 3], 'run_at', run_s, 'updated_at', nows)
      if target == behind then
        redis.call('ZADD', KEYS[8], run_s, target)
      else -- at its plain level, in due-time order (a fair job too: fair.py)
        local p = level(redis.call('HGET', job, 'priority'))
        redis.call('ZREM', tag .. 'fair:' .. p, target)
        redis.call('ZADD', KEYS[p + 1], run_s, target)
      end
      stored = true
    end
    out[i + 2] = {answer, redis.call('HGETALL', KEYS[6] .. answer)}
  elseif (links and links[i + 1] or listed(i)) and redis.call('EXISTS', KEYS[9 + i]) == 1 then
    out[i + 2] = 0 -- stored by this very call, run again (a lost reply): its edges may have moved
    -- on; a job bound for a ready list is there already, or claimed since
  else
    local job = KEYS[9 + i]
    local fields = new_hash(micros_s, run_s, nows, ARGV[b + 4], ARGV[b + 5], ARGV[b + 6])
    fields[2], fields[4] = ARGV[b + 2], ARGV[b + 3]
    redis.call('HSET', job, unpack(fields))
    if ARGV[b + 13] ~= '' then
      redis.call('HSET', job, 'remark', ARGV[b + 13])
    end
    if ARGV[b + 14] ~= '' then
      redis.call('HSET', job, 'tags', ARGV[b + 14])
    end
    local fair_key = ARGV[b + 15]
    if fair_key ~= '' then
      redis.call('HSET', job, 'fair_key', fair_key)
    end
    local expiry = ARGV[b + 10]
    if expiry ~= '' then
      local at = tonumber(string.sub(expiry, 2))
      if string.sub(expiry, 1, 1) == '+' then at = now + at end
      redis.call('HSET', job, 'expires_at', fmt(at))
    end
    if key ~= '' then
      redis.call('HSET', job, 'key', key)
    end
    local link = links and links[i + 1]
    if link then -- blocked until its parents finish (release.lua)
      redis.call('HSET', job, 'state', 'blocked', 'after_any', ARGV[link] == 'any' and '1' or '0')
      redis.call('ZADD', tag .. 'blocked', nows, id)
      redis.call('ZADD', tag .. 'linking', now + 10, id) -- until linked.lua: else the sweep links it
      local n = tonumber(ARGV[link + 1])
      local parents = tag .. 'parents:' .. id
      redis.call('DEL', parents)
      for j = link + 2, link + 1 + n, 1000 do
        redis.call('SADD', parents, unpack(ARGV, j, math.min(j + 999, link + 1 + n)))
      end
    end
    if holder then -- the holder runs: this one waits behind it (blocked: release.lua places it)
      redis.call('HSET', KEYS[7], key, id)
      if not link then redis.call('ZADD', KEYS[8], run_s, id) end
    elseif link then
      if key ~= '' then redis.call('HSET', KEYS[4], key, id) end
    else
      if key ~= '' then redis.call('HSET', KEYS[4], key, id) end
      if fair_key ~= '' and run_at == 0 and delay == 0 then -- due now: claimed by virtual time
        fair_place(tag, level(ARGV[b + 4]), fair_key, tonumber(ARGV[b + 16]), id)
      elseif listed(i) then -- due now, no key: its priority's ready list, in enqueue order
        collect(pushes, tag .. 'ready:' .. level(ARGV[b + 4]), id)
      else
        collect(adds, KEYS[level(ARGV[b + 4]) + 1], run_s, id)
      end
      stored = true
    end
    out[i + 2] = 0
  end
end
flush('ZADD', adds)
flush('LPUSH', pushes)
if stored then wake(KEYS[5]) end
return out
