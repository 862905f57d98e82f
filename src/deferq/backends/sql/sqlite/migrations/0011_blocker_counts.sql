-- deferq on SQLite, schema version 11: each blocked job counts the parents it still
-- waits for (`blockers`, one per edge in {deps}): a parent's release subtracts from
-- the child instead of looking for the child's other edges. Jobs blocked before this
-- version are counted here.
ALTER TABLE {jobs} ADD COLUMN blockers INTEGER NOT NULL DEFAULT 0;
UPDATE {jobs} SET blockers = (SELECT count(*) FROM {deps} WHERE {deps}.child = {jobs}.id)
WHERE id IN (SELECT child FROM {deps});
