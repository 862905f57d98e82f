-- settle: record how leased jobs ended (succeeded | retry | dead | release).
--
-- KEYS, 4 per outcome: job hash; active zset of its queue; target zset (the
--             waiting zset of the job's priority for retry and release, else the
--             succeeded or dead zset); wake list of its queue
-- ARGV, 7 per outcome: kind, id, worker, attempts (the lease fence),
--             delay seconds (retry), error (dead and retry), result JSON ('' = none)
-- An outcome applies only while the lease fence holds.
-- Returns one flag per outcome: 1 = applied, 0 = the lease was lost.
local now, nows = clock()
local out = {}
local released, placed = {}, {}
local woken = {}
for i = 0, #KEYS / 4 - 1 do
  local job, active, target, wake_key = KEYS[i * 4 + 1], KEYS[i * 4 + 2], KEYS[i * 4 + 3], KEYS[i * 4 + 4]
  local b = i * 7
  local kind, id, worker, attempts = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  if owned(job, worker, attempts) then
    collect(released, active, id)
    -- worker and lease_until are blanked rather than deleted: one command, not two
    if kind == 'succeeded' then
      local result = ARGV[b + 7]
      if result == '' then
        redis.call('HSET', job, 'state', 'succeeded', 'finished_at', nows, 'worker', '',
          'lease_until', '')
      else
        redis.call('HSET', job, 'state', 'succeeded', 'finished_at', nows, 'worker', '',
          'lease_until', '', 'result', result)
      end
      collect(placed, target, nows, id)
    elseif kind == 'dead' then
      redis.call('HSET', job, 'state', 'dead', 'finished_at', nows, 'error', ARGV[b + 6],
        'worker', '', 'lease_until', '')
      collect(placed, target, nows, id)
    elseif kind == 'retry' then
      local run_at = fmt(now + tonumber(ARGV[b + 5]))
      redis.call('HSET', job, 'state', 'queued', 'run_at', run_at, 'error', ARGV[b + 6],
        'worker', '', 'lease_until', '')
      collect(placed, target, run_at, id)
      woken[wake_key] = true
    else -- release: back to waiting, the attempt not counted
      redis.call('HSET', job, 'state', 'queued', 'attempts', tonumber(attempts) - 1,
        'worker', '', 'lease_until', '')
      collect(placed, target, fmt(num(redis.call('HGET', job, 'run_at'), now)), id)
      woken[wake_key] = true
    end
    out[i + 1] = 1
  else
    out[i + 1] = 0
  end
end
flush('ZREM', released)
flush('ZADD', placed)
for key in pairs(woken) do wake(key) end
return out
