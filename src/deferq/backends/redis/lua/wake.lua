-- wake: jobs of one queue waiting for their due time are due now (a durable step's
-- event came: one call for all of an event's waiting jobs in the queue).
--
-- KEYS[1..3]  waiting zsets of priority 0, 1, 2
-- KEYS[4]     wake list
-- KEYS[5..]   job hashes, one per ARGV entry
-- ARGV        job ids
-- Returns how many were woken (a job not waiting for a due time is left alone).
local now, nows = clock()
local woken = 0
for i, id in ipairs(ARGV) do
  local job = KEYS[i + 4]
  materialize(job, id)
  if due_now(job, id, 1, now, nows) then woken = woken + 1 end
end
if woken > 0 then wake(KEYS[4]) end
return woken
