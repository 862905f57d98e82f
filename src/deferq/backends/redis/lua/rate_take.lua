-- rate_take: one turn of a rate limit (GCRA). The key holds the limit's next free time.
--
-- KEYS[1]     the limit's record ({P:rate:<key>})
-- ARGV[1]     seconds between turns
-- Returns {the turn, now}, as text: the later of the next free time and now; the next
-- free time moves one interval past it. The record expires once its time has passed.
local now, nows = clock()
local interval = tonumber(ARGV[1])
local turn = math.max(tonumber(redis.call('GET', KEYS[1]) or 0) or 0, now)
local after = turn + interval
redis.call('SET', KEYS[1], fmt(after), 'PX', math.ceil((after - now) * 1000) + 1000)
return {fmt(turn), nows}
