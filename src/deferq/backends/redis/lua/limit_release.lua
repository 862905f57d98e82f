-- limit_release: a batch of the jobs of one queue noted held by a limit (limit_hold.lua)
-- is due now: each one still waiting, due at the time noted (within the slack). The
-- notes taken leave, whatever their jobs became.
--
-- KEYS[1]     the queue's notes of the limit ({P:q:Q}:limited:<name>)
-- KEYS[2..4]  waiting zsets of priority 0, 1, 2
-- KEYS[5]     wake list
-- KEYS[6]     job-key prefix
-- ARGV[1]     batch size (notes)
-- ARGV[2]     slack in seconds
-- Returns {notes taken, jobs made due}.
local now, nows = clock()
local slack = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local notes = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
local ids, woken = {}, 0
for i = 1, #notes, 2 do
  local id = notes[i]
  ids[#ids + 1] = id
  if due_now(KEYS[6] .. id, id, 2, now, nows, tonumber(notes[i + 1]), slack) then woken = woken + 1 end
end
if #ids > 0 then redis.call('ZREM', KEYS[1], unpack(ids)) end
if woken > 0 then wake(KEYS[5]) end
return {#ids, woken}
