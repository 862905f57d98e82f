-- deferq on MySQL / MariaDB, schema version 2: what a running task reports of its
-- progress (deferq.current_job().progress(0.4, "3 of 8 files")), kept after the job
-- ends; progress is 0..1. One statement, so a cut-off migration leaves both columns
-- or neither.
ALTER TABLE {jobs}
    ADD COLUMN progress DOUBLE NULL,
    ADD COLUMN progress_message TEXT NULL;
