-- kv_list: every live record of a namespace; names of expired ones leave the index.
--
-- KEYS[1]     the namespace's index set     ({P:kv:NS}:index)
-- KEYS[2]     record-key prefix             ({P:kv:NS}:r:), records are prefix .. name
-- ARGV        none
-- Returns {name, value, name, value, ...}.
local out = {}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local value = redis.call('GET', KEYS[2] .. name)
  if value then
    out[#out + 1] = name
    out[#out + 1] = value
  else
    redis.call('SREM', KEYS[1], name)
  end
end
return out
