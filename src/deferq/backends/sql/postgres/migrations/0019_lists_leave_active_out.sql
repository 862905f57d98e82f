-- deferq on PostgreSQL, schema version 19: a claim writes three index entries less per
-- job. A claim and a settle change a job's state, so neither is a HOT update: every
-- index whose condition the new row meets takes an entry. The list indexes of migration
-- 0009 now leave active jobs out, so a claim (queued -> active) writes none of theirs:
-- a settle-shaped update of 5,000 jobs of 20,000 took 11-16 µs a row without them
-- against 18-25 with them (5 WAL records a row, not 8). Active jobs are few (those
-- leased now): a list of them reads deferq_jobs_leased and sorts. Built again here, so
-- a store holding many jobs takes a while to migrate.
DROP INDEX {schema_prefix}deferq_jobs_state;
DROP INDEX {schema_prefix}deferq_jobs_queue_state;
DROP INDEX {schema_prefix}deferq_jobs_task_state;
CREATE INDEX deferq_jobs_state ON {jobs} (state, seq) WHERE state <> 'active';
CREATE INDEX deferq_jobs_queue_state ON {jobs} (queue, state, seq) WHERE state <> 'active';
CREATE INDEX deferq_jobs_task_state ON {jobs} (task, state, seq) WHERE state <> 'active';
