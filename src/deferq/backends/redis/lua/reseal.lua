-- reseal: put a job's encrypted value re-encrypted under the current key in place of the
-- old one (deferq encryption rotate), where the job still holds it whole: a JSON string in
-- its payload or result (found with its quotes, as it is, not as a pattern), or its whole
-- error or progress message.
--
-- KEYS[1]     job hash
-- ARGV[1]     the old encrypted text
-- ARGV[2]     the new encrypted text
-- ARGV[3]     job id
-- Returns 1 when a field held the old text (now the new), 0 otherwise.
materialize(KEYS[1], ARGV[3])
local changed = 0
local quoted = '"' .. ARGV[1] .. '"'
for _, field in ipairs({'payload', 'result'}) do
  local value = redis.call('HGET', KEYS[1], field)
  if value then
    local first, last = string.find(value, quoted, 1, true)
    if first then
      redis.call('HSET', KEYS[1], field, string.sub(value, 1, first - 1) .. '"' .. ARGV[2] .. '"' ..
        string.sub(value, last + 1))
      changed = 1
    end
  end
end
for _, field in ipairs({'error', 'progress_message'}) do
  if redis.call('HGET', KEYS[1], field) == ARGV[1] then
    redis.call('HSET', KEYS[1], field, ARGV[2])
    changed = 1
  end
end
return changed
