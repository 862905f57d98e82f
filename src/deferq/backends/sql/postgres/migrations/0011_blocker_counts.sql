-- deferq on PostgreSQL, schema version 11: each blocked job counts the parents it
-- still waits for (`blockers`, one per edge in {deps}). A parent's release takes its
-- edges away and subtracts them from the child in one statement, so the child's row
-- is locked only while that statement runs: the members of a chord or batch never
-- wait for each other across round trips. Adding a column with a constant default
-- rewrites nothing; jobs blocked before this version are counted here.
ALTER TABLE {jobs} ADD COLUMN blockers integer NOT NULL DEFAULT 0;
UPDATE {jobs} AS j SET blockers = (SELECT count(*) FROM {deps} AS d WHERE d.child = j.id)
WHERE j.id IN (SELECT child FROM {deps});
