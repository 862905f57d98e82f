-- step_up: a job waiting behind the running holder of its key (enqueue.lua) takes the
-- key once the holder is gone (finished, or its hash deleted), and becomes claimable.
--
-- KEYS[1..3]  waiting zsets of priority 0, 1, 2
-- KEYS[4]     unique-key index hash
-- KEYS[5]     wake list
-- KEYS[6]     job-key prefix (jobs' hashes are prefix .. id, same slot)
-- KEYS[7]     key -> job waiting behind its holder
-- KEYS[8]     zset of waiting jobs held back from claims
-- ARGV        the unique keys to look at; none: every key with a job waiting behind
--             (the sweep, after recover)
-- Returns how many stepped up.
local keys = ARGV
if #keys == 0 then
  keys = {}
  local all = redis.call('HKEYS', KEYS[7])
  for _, key in ipairs(all) do keys[#keys + 1] = key end
end
local moved = 0
for _, key in ipairs(keys) do
  local next_id = redis.call('HGET', KEYS[7], key)
  if next_id then
    local holder = redis.call('HGET', KEYS[4], key)
    local state = redis.call('HGET', KEYS[6] .. next_id, 'state')
    if state == 'blocked' then -- it waits for its parents first (release.lua)
    elseif state ~= 'queued' then -- cancelled or gone: forget it
      redis.call('HDEL', KEYS[7], key)
      redis.call('ZREM', KEYS[8], next_id)
    elseif not (holder and unfinished(redis.call('HGET', KEYS[6] .. holder, 'state'))) then
      step_up_one(key, next_id)
      moved = moved + 1
    end
  end
end
if moved > 0 then wake(KEYS[5]) end
return moved
