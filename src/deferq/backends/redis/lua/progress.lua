-- progress: store what running tasks last reported of their progress.
--
-- KEYS, 1 per job: job hash
-- ARGV, 5 per job: id, worker, attempts (the lease fence), progress (0..1),
--             message ('' = none)
-- Returns one flag per job: 1 = stored, 0 = the lease was lost.
local out = {}
for i = 0, #KEYS - 1 do
  local b = i * 5
  if owned(KEYS[i + 1], ARGV[b + 2], ARGV[b + 3]) then
    redis.call('HSET', KEYS[i + 1], 'progress', ARGV[b + 4], 'progress_message', ARGV[b + 5])
    out[i + 1] = 1
  else
    out[i + 1] = 0
  end
end
return out
