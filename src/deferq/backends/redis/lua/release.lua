-- release: children of one queue hear that a parent finished (backends/deps.py): each
-- edge is taken away once (SREM from the child's parents set, whoever calls first);
-- the child runs when its last one goes, or is cancelled, naming the parent.
--
-- KEYS[1..3]  waiting zsets of priority 0, 1, 2 of the children's queue
-- KEYS[4]     unique-key index hash
-- KEYS[5]     wake list
-- KEYS[6]     job-key prefix ({P:q:Q}:job:)
-- KEYS[7]     key -> job waiting behind its running holder
-- KEYS[8]     zset of waiting jobs held back from claims
-- KEYS[9]     blocked zset
-- KEYS[10]    cancelled zset
-- ARGV, 5 per edge: child id, parent id, what the parent's outcome means for a child
--             that runs after all ('release' or 'cancel', deps.verdict) and for one that
--             runs after any outcome, the error of a child cancelled for it (deps.reason)
-- A cancelled child that has children of its own is marked in `released` (on_finish).
-- Returns {how many children moved, then the ids of those marked so}.
local now, nows = clock()
local tag = string.sub(KEYS[6], 1, -5)
local out = {0}
local woken = false
for i = 1, #ARGV, 5 do
  local child = ARGV[i]
  local job = KEYS[6] .. child
  local parents = tag .. 'parents:' .. child
  if redis.call('SREM', parents, ARGV[i + 1]) == 1 then
    local f = redis.call('HMGET', job, 'state', 'after_any', 'priority', 'run_at', 'key', 'notify')
    if f[1] == 'blocked' then
      local verdict = f[2] == '1' and ARGV[i + 3] or ARGV[i + 2]
      if verdict == 'cancel' then
        redis.call('HSET', job, 'state', 'cancelled', 'error', ARGV[i + 4], 'finished_at', nows, 'updated_at', nows)
        redis.call('ZREM', KEYS[9], child)
        redis.call('ZADD', KEYS[10], nows, child)
        redis.call('DEL', parents)
        if f[5] and redis.call('HGET', KEYS[7], f[5]) == child then redis.call('HDEL', KEYS[7], f[5]) end
        on_finish(job, child, f[6], now, true)
        if notifies(f[6], 'c') then out[#out + 1] = child end
        out[1] = out[1] + 1
      elseif redis.call('SCARD', parents) == 0 then
        local run_s = fmt(math.max(num(f[4], now), now))
        redis.call('HSET', job, 'state', 'queued', 'run_at', run_s, 'updated_at', nows)
        redis.call('ZREM', KEYS[9], child)
        if f[5] and redis.call('HGET', KEYS[7], f[5]) == child then -- behind its key's holder
          redis.call('ZADD', KEYS[8], run_s, child)
          local holder = redis.call('HGET', KEYS[4], f[5])
          if not (holder and unfinished(redis.call('HGET', KEYS[6] .. holder, 'state'))) then
            step_up_one(f[5], child)
          end
        else
          redis.call('ZADD', KEYS[level(f[3]) + 1], run_s, child)
        end
        woken = true
        out[1] = out[1] + 1
      end
    end
  end
end
if woken then wake(KEYS[5]) end
return out
