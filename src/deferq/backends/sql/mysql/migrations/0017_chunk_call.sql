-- deferq on MySQL / MariaDB, schema version 17: the chunk call that last ran a job of a
-- chunk task (chunks.py; Job.chunk_call), written by that call's settle, so that a
-- call's jobs find each other (find_chunk, through the index). NULL for every job stored
-- before this version, and for plain tasks' jobs (a settle that leaves the value as it
-- is does not touch the index).
ALTER TABLE {jobs}
    ADD COLUMN chunk_call VARCHAR(64) NULL,
    ADD KEY deferq_jobs_chunk_call (chunk_call, seq);
