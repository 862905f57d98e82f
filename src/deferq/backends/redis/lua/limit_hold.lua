-- limit_hold: note that leased jobs of one queue snooze until a moment for the limits
-- that would give them back (limits/__init__.py): a zset per queue and limit name,
-- score = due time.
--
-- KEYS        the queue's notes of each limit name ({P:q:Q}:limited:<name>)
-- ARGV        pairs: job id, its due time as its snooze's outcome sets it
-- Notes whose time has come leave first (their jobs are due: nothing to give back), and
-- the zset expires a second after its last note's time.
local now = clock()
for _, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  for i = 1, #ARGV, 2 do
    redis.call('ZADD', key, ARGV[i + 1], ARGV[i])
  end
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', key, math.ceil((tonumber(last[2]) + 1) * 1000))
end
return 1
