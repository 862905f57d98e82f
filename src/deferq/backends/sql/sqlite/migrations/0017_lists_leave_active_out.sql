-- deferq on SQLite, schema version 17: a claim and a settle write half as many list-index
-- entries. The list indexes of migration 0009 held every job, so a claim (queued ->
-- active) and a settle (active -> succeeded) each moved a job's entry in all three; they
-- now leave active jobs out: a claim only takes the queued entries away, a settle only
-- puts the finished ones in. Active jobs are few (those leased now): a list of them reads
-- deferq_jobs_leased and sorts. A query uses these indexes only when it says
-- `state <> 'active'` in so many words (sqlite.py state_condition). Built again here, so
-- a store holding many jobs takes a while to migrate.
DROP INDEX IF EXISTS deferq_jobs_state;
DROP INDEX IF EXISTS deferq_jobs_queue_state;
DROP INDEX IF EXISTS deferq_jobs_task_state;
CREATE INDEX deferq_jobs_state ON {jobs} (state) WHERE state <> 'active';
CREATE INDEX deferq_jobs_queue_state ON {jobs} (queue, state) WHERE state <> 'active';
CREATE INDEX deferq_jobs_task_state ON {jobs} (task, state) WHERE state <> 'active';
