-- deferq on PostgreSQL, schema version 2: what a running task reports of its progress
-- (deferq.current_job().progress(0.4, "3 of 8 files")), kept after the job ends;
-- progress is 0..1. Nullable columns without a default: adding them rewrites nothing.
ALTER TABLE {jobs}
    ADD COLUMN progress double precision,
    ADD COLUMN progress_message text;
