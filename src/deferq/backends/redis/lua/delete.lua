-- delete: delete one finished job (succeeded, dead or cancelled) for good.
--
-- KEYS[1]     job hash
-- KEYS[2..4]  succeeded, dead, cancelled zsets of its queue
-- KEYS[5]     unique-key index hash
-- ARGV[1]     job id
-- KEYS[6]     its queue's released zset
-- A unique key is forgotten only if it still points at the deleted job (as purge.lua).
-- Returns 1 when deleted, 0 when the job is unfinished or gone, 2 when jobs that run
-- after it have not all heard of it yet (the caller releases them, and asks again).
local f = redis.call('HMGET', KEYS[1], 'state', 'key')
local zset = ({succeeded = 2, dead = 3, cancelled = 4})[f[1] or '']
if not zset then return 0 end
if redis.call('ZSCORE', KEYS[6], ARGV[1]) then return 2 end
if f[2] and redis.call('HGET', KEYS[5], f[2]) == ARGV[1] then
  redis.call('HDEL', KEYS[5], f[2])
end
redis.call('ZREM', KEYS[zset], ARGV[1])
redis.call('DEL', KEYS[1])
return 1
