-- deferq on PostgreSQL, schema version 11: each blocked job counts the parents it
-- still waits for (`blockers`, one per edge in {deps}). A parent's release takes its
-- edges away and subtracts them from the child in the statement that settles it, so
-- the child's row is locked only while that statement runs: the members of a chord or
-- batch never wait for each other across round trips. Adding a column with a
-- constant default rewrites nothing; jobs blocked before this version are counted.
ALTER TABLE {jobs} ADD COLUMN blockers integer NOT NULL DEFAULT 0;
UPDATE {jobs} AS j SET blockers = (SELECT count(*) FROM {deps} AS d WHERE d.child = j.id)
WHERE j.id IN (SELECT child FROM {deps});

-- `waited_for`: some job was linked to run after this one. Enqueueing such a job sets
-- it on the parent's row (a write, not only a lock), so a settle that waited for that
-- enqueue sees it in the row it updates, even though the statement's snapshot is too
-- old to show the new edges: it then releases them in a statement of its own.
ALTER TABLE {jobs} ADD COLUMN waited_for boolean NOT NULL DEFAULT false;
UPDATE {jobs} SET waited_for = true WHERE id IN (SELECT parent FROM {deps});
