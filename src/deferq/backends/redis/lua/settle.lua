-- settle: record how leased jobs ended (succeeded | retry | dead | release | snooze |
-- cancelled).
--
-- KEYS, 10 per queue: job-key prefix (a job's hash is prefix .. id, same slot); active
--             zset; wake list; cancelled zset; hash of jobs waiting behind a key's holder;
--             succeeded zset; dead zset; waiting zsets of priority 0, 1, 2
-- ARGV, runs of outcomes that share all but their job and result (a chunk's items, a
--             batch of jobs of one task: most of a batch is one run), each: how many
--             outcomes n, their target zset as a KEYS index (the waiting zset of the
--             jobs' priority for retry, release and snooze, else the succeeded, dead or
--             cancelled zset; the queue is that key's block of 10), kind, worker,
--             attempts (the lease fence), delay seconds (retry, snooze; a snooze to a
--             moment: '@' and its epoch seconds), error (dead and retry; for a snooze,
--             the durable wait it hands the job back for, "<event>\t<key>", kept in the
--             hash's `waits_for`; '' = none), the chunk call that ran them (the hash's
--             `chunk_call`; '' = none: the field is left as it is); then per outcome its
--             job id and result JSON ('' = none)
-- (Each queue's keys once, not each outcome's: a worker's batch is mostly one queue.)
-- An outcome applies only while the lease fence holds. A job whose cancel was
-- requested ends cancelled unless it succeeded (base.py).
-- A job that finishes is marked for its children's release and wakes its waiters
-- (on_finish).
-- Returns one flag per outcome: 0 = the lease was lost, else 1 = applied, plus 1 when
-- the job finished while a job waits behind it for its key (the caller runs
-- step_up.lua next), plus 2 when it finished and jobs run after it (the caller
-- releases them: flows.py).
local now, nows = clock()
local out = {}
local released, placed = {}, {}
local woken = {}
local r = 1
while r <= #ARGV do
  local n, t = tonumber(ARGV[r]), tonumber(ARGV[r + 1])
  local kind, worker, attempts, delay, err, call =
    ARGV[r + 2], ARGV[r + 3], ARGV[r + 4], ARGV[r + 5], ARGV[r + 6], ARGV[r + 7]
  local k = t - (t - 1) % 10 -- the first key of the queue's block
  local prefix, active, target, wake_key = KEYS[k], KEYS[k + 1], KEYS[t], KEYS[k + 2]
  -- a success's fields but its result, the same for the whole run
  local done = {'state', 'succeeded', 'finished_at', nows, 'worker', '', 'lease_until', '', 'updated_at', nows}
  if call ~= '' then done[11], done[12] = 'chunk_call', call end
  for a = r + 8, r + 7 + 2 * n, 2 do
    local id, result = ARGV[a], ARGV[a + 1]
    local job = prefix .. id
    local held, asked, key, notify, waits = owned(job, worker, attempts)
    if held then
      local finished = true
      collect(released, active, id)
      if call ~= '' and kind ~= 'succeeded' then redis.call('HSET', job, 'chunk_call', call) end
      -- worker and lease_until are blanked rather than deleted: one command, not two
      if kind == 'cancelled' or (asked and kind ~= 'succeeded') then
        if kind == 'cancelled' or kind == 'dead' or kind == 'retry' then
          redis.call('HSET', job, 'error', err)
        end
        redis.call('HSET', job, 'state', 'cancelled', 'finished_at', nows, 'worker', '', 'lease_until', '',
          'updated_at', nows)
        collect(placed, KEYS[k + 3], nows, id)
      elseif kind == 'succeeded' then -- one HSET with the result and the chunk call too
        if result == '' then redis.call('HSET', job, unpack(done))
        else redis.call('HSET', job, 'result', result, unpack(done)) end
        collect(placed, target, nows, id)
      elseif kind == 'dead' then
        redis.call('HSET', job, 'state', 'dead', 'finished_at', nows, 'error', err,
          'worker', '', 'lease_until', '', 'updated_at', nows)
        collect(placed, target, nows, id)
      elseif kind == 'retry' then
        local run_at = fmt(now + tonumber(delay))
        redis.call('HSET', job, 'state', 'queued', 'run_at', run_at, 'error', err,
          'worker', '', 'lease_until', '', 'updated_at', nows)
        collect(placed, target, run_at, id)
        woken[wake_key] = true
        finished = false
      elseif kind == 'snooze' then -- due again after the delay (or at the moment), the attempt not counted
        local run_at = string.sub(delay, 1, 1) == '@' and string.sub(delay, 2) or fmt(now + tonumber(delay))
        redis.call('HSET', job, 'state', 'queued', 'run_at', run_at, 'attempts', tonumber(attempts) - 1,
          'worker', '', 'lease_until', '', 'updated_at', nows)
        if err ~= '' then redis.call('HSET', job, 'waits_for', err) end
        waits = waits and err == '' -- (the wait it had is cleared below unless it waits again)
        collect(placed, target, run_at, id)
        woken[wake_key] = true
        finished = false
      else -- release: back to waiting, the attempt not counted
        redis.call('HSET', job, 'state', 'queued', 'attempts', tonumber(attempts) - 1,
          'worker', '', 'lease_until', '', 'updated_at', nows)
        local f = redis.call('HMGET', job, 'run_at', 'created_at', 'ct')
        collect(placed, target, fmt(num(due_at(f[1], f[2], f[3]), now)), id)
        woken[wake_key] = true
        finished = false
      end
      if waits then redis.call('HDEL', job, 'waits_for') end -- its wait is over (rare: no call for most jobs)
      local flag = 1
      if finished then
        if key and redis.call('HEXISTS', KEYS[k + 4], key) == 1 then flag = 2 end
        if notify then -- most jobs have none: no call
          on_finish(job, id, notify, now, true)
          if notifies(notify, 'c') then flag = flag + 2 end
        end
      end
      out[#out + 1] = flag
    else
      out[#out + 1] = 0
    end
  end
  r = r + 8 + 2 * n
end
flush('ZREM', released)
flush('ZADD', placed)
for key in pairs(woken) do wake(key) end
return out
