-- deferq on MySQL / MariaDB, schema version 11: each blocked job counts the parents
-- it still waits for (`blockers`, one per edge in {deps}), so a parent's release
-- subtracts from the child in one UPDATE, whose lock ends with the packet that holds
-- it (UPDATE ...; COMMIT). Jobs blocked before this version are counted here.
ALTER TABLE {jobs} ADD COLUMN blockers INT NOT NULL DEFAULT 0;
UPDATE {jobs} AS j JOIN (SELECT child, COUNT(*) AS n FROM {deps} GROUP BY child) AS d ON d.child = j.id
SET j.blockers = d.n;
