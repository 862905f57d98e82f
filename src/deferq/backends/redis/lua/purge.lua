-- purge: delete finished jobs of one queue and state that finished long enough ago.
--
-- KEYS[1]     finished zset (succeeded, dead or cancelled; score = finished_at)
-- KEYS[2]     unique-key index hash
-- KEYS[3]     job-key prefix (purged jobs' hashes are prefix .. id, same slot)
-- ARGV[1]     older_than seconds
-- ARGV[2]     at most this many jobs per call (the caller repeats while it is reached)
-- A unique key is forgotten only if it still points at the purged job. A job whose
-- children have not all heard of it yet (marked in `released`) is kept until they have.
-- Returns the number of jobs deleted.
local now = clock()
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', fmt(now - tonumber(ARGV[1])),
  'LIMIT', 0, tonumber(ARGV[2]))
local released = string.sub(KEYS[3], 1, -5) .. 'released'
local deleted = 0
for _, id in ipairs(ids) do
  local job = KEYS[3] .. id
  if not redis.call('ZSCORE', released, id) then
    local key = redis.call('HGET', job, 'key')
    if key and redis.call('HGET', KEYS[2], key) == id then
      redis.call('HDEL', KEYS[2], key)
    end
    redis.call('DEL', job)
    redis.call('ZREM', KEYS[1], id)
    deleted = deleted + 1
  end
end
return deleted
