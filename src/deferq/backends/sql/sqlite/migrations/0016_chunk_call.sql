-- deferq on SQLite, schema version 16: the chunk call that last ran a job of a chunk
-- task (chunks.py; Job.chunk_call), written by that call's settle, so that a call's
-- jobs find each other (find_chunk, through the index: only jobs of chunk tasks have
-- one). NULL for every job stored before this version, and for plain tasks' jobs.
ALTER TABLE {jobs} ADD COLUMN chunk_call TEXT;
CREATE INDEX IF NOT EXISTS deferq_jobs_chunk_call ON {jobs} (chunk_call, seq) WHERE chunk_call IS NOT NULL;
