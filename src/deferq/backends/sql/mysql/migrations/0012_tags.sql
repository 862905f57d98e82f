-- deferq on MySQL / MariaDB, schema version 12: a job's tags (options(tags=...)), a
-- JSON array of texts; NULL when it has none, as every job stored before this version.
ALTER TABLE {jobs} ADD COLUMN tags TEXT NULL;
