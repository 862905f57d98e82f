-- deferq on MySQL / MariaDB, schema version 7: the job record of the MySQL seed (S1-3):
-- when a job last changed, a free-text remark, and the worker that last ran it (kept
-- after the job ends, unlike `worker`, the lease holder). Older rows start NULL.
ALTER TABLE {jobs} ADD COLUMN updated_at DOUBLE NULL,
                   ADD COLUMN remark TEXT NULL,
                   ADD COLUMN last_worker VARCHAR(255) NULL;
