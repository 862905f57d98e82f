-- purge: delete finished jobs of one queue and state that finished long enough ago.
--
-- KEYS[1]     finished zset (succeeded, dead or cancelled; score = finished_at)
-- KEYS[2]     unique-key index hash
-- KEYS[3]     job-key prefix (purged jobs' hashes are prefix .. id, same slot)
-- ARGV[1]     older_than seconds
-- ARGV[2]     at most this many jobs per call (the caller repeats while it is reached)
-- A unique key is forgotten only if it still points at the purged job.
-- Returns the number of jobs deleted.
local now = clock()
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', fmt(now - tonumber(ARGV[1])),
  'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  local job = KEYS[3] .. id
  local key = redis.call('HGET', job, 'key')
  if key and redis.call('HGET', KEYS[2], key) == id then
    redis.call('HDEL', KEYS[2], key)
  end
  redis.call('DEL', job)
  redis.call('ZREM', KEYS[1], id)
end
return #ids
