-- kv_delete: delete records of one namespace and their names in its index.
--
-- KEYS[1]     the namespace's index set     ({P:kv:NS}:index)
-- KEYS[2..]   the records, one per ARGV entry ({P:kv:NS}:r:<name>)
-- ARGV        record names
-- Returns how many live records were deleted.
local deleted = 0
for i, name in ipairs(ARGV) do
  redis.call('SREM', KEYS[1], name)
  deleted = deleted + redis.call('DEL', KEYS[i + 1])
end
return deleted
