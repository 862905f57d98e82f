-- deferq on SQLite, schema version 2: what a running task reports of its progress
-- (deferq.current_job().progress(0.4, "3 of 8 files")), kept after the job ends.
-- progress is 0..1.
ALTER TABLE {jobs} ADD COLUMN progress REAL;
ALTER TABLE {jobs} ADD COLUMN progress_message TEXT;
