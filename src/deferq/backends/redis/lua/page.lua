-- page: the next members of one sorted set of jobs, highest score first, for a keyset
-- page (backends/redis/search.py).
--
-- KEYS[1]     the sorted set (a queue's waiting, active or finished jobs)
-- ARGV[1]     highest score wanted ('+inf', or a score)
-- ARGV[2]     lowest score wanted ('-inf', or '(' score)
-- ARGV[3]     the cursor's score ('' on the first page)
-- ARGV[4]     the cursor's job id
-- ARGV[5]     how many
-- Returns member, score, member, score, ...: after the cursor's job by rank when this set
-- holds it (ties in score keep their order), else those scored below the cursor.
local key, limit = KEYS[1], tonumber(ARGV[5])
local high = ARGV[1]
if ARGV[3] ~= '' then
  local rank = redis.call('ZREVRANK', key, ARGV[4])
  if rank then
    return redis.call('ZREVRANGE', key, rank + 1, rank + limit, 'WITHSCORES')
  end
  if high == '+inf' or tonumber(ARGV[3]) < tonumber(high) then high = '(' .. ARGV[3] end
end
return redis.call('ZREVRANGEBYSCORE', key, high, ARGV[2], 'WITHSCORES', 'LIMIT', 0, limit)
