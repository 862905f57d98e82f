-- link: add edges parent -> child in the parents' queue (the children are stored
-- blocked already, each naming its parents: enqueue.lua).
--
-- KEYS[1]     job-key prefix of the parents' queue ({P:q:Q}:job:)
-- ARGV, 2 per edge: parent id, child ("<child queue> <child id>")
-- A parent that has finished already is marked in `released` (as on_finish does), as if
-- it finished after the link: the caller releases it next, or the sweep does.
-- Returns per edge the parent's state, or '' when the parent is gone (purged since
-- the caller found it: its edge counts as a cancelled parent's, and is not added).
local now = clock()
local tag = string.sub(KEYS[1], 1, -5)
local out = {}
for i = 1, #ARGV, 2 do
  local parent = ARGV[i]
  local job = KEYS[1] .. parent
  materialize(job, parent)
  local state = redis.call('HGET', job, 'state')
  if state then
    redis.call('SADD', tag .. 'children:' .. parent, ARGV[i + 1])
    add_notify(job, 'c')
    if not unfinished(state) then redis.call('ZADD', tag .. 'released', now + 5, parent) end
    out[#out + 1] = state
  else
    out[#out + 1] = ''
  end
end
return out
