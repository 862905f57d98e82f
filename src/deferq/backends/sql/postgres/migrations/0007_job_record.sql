-- deferq on PostgreSQL, schema version 7: the job record of the MySQL seed (S1-3):
-- when a job last changed, a free-text remark, and the worker that last ran it (kept
-- after the job ends, unlike `worker`, the lease holder). Older rows start NULL.
ALTER TABLE {jobs} ADD COLUMN updated_at double precision,
                   ADD COLUMN remark text,
                   ADD COLUMN last_worker text;
