-- kv_delete: delete a record and its name in the namespace's index.
--
-- KEYS[1]     the record                    ({P:kv:NS}:r:<name>)
-- KEYS[2]     the namespace's index set     ({P:kv:NS}:index)
-- ARGV[1]     record name
-- Returns 1 when a live record was deleted, else 0.
redis.call('SREM', KEYS[2], ARGV[1])
return redis.call('DEL', KEYS[1])
