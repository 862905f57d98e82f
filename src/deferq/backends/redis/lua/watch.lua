-- watch: someone is about to wait for a job to finish (RedisBackend.changes): its
-- `notify` field gets a `w`, so the script that finishes it pushes a token to its done
-- list (on_finish).
--
-- KEYS[1]     job hash
-- KEYS[2]     its done list: emptied (a token left from an earlier finish, before a
--             retry, must not wake anyone now)
-- ARGV[1]     job id
-- Returns 1 when the job has finished (or is gone): no need to wait; else 0.
materialize(KEYS[1], ARGV[1])
local state = redis.call('HGET', KEYS[1], 'state')
if not unfinished(state) then return 1 end
add_notify(KEYS[1], 'w')
redis.call('DEL', KEYS[2])
return 0
