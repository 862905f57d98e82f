-- deferq on MySQL / MariaDB, schema version 14: the durable wait a scheduled job handed
-- itself back for ("<event>\t<key>", job.wait_for), written by that outcome's settle
-- and cleared by the next, so that lists filter `waiting` jobs without reading their
-- checkpoints. NULL for every job stored before this version.
ALTER TABLE {jobs} ADD COLUMN waits_for TEXT NULL;
