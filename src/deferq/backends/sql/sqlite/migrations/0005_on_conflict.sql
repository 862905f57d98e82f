-- deferq on SQLite, schema version 5: on_conflict replace / debounce. A job enqueued
-- with a key whose holder is running waits behind it, stored with its priority raised
-- by 20 (base.BEHIND): out of the claims' reach, and not the key's holder. So the key
-- index counts holders only (priority < 20), and a second index allows one job
-- waiting behind each key.
DROP INDEX IF EXISTS deferq_jobs_live_key;
CREATE UNIQUE INDEX deferq_jobs_live_key
    ON {jobs} (key) WHERE key IS NOT NULL AND state IN ('queued', 'active') AND priority < 20;
CREATE UNIQUE INDEX deferq_jobs_behind
    ON {jobs} (key) WHERE key IS NOT NULL AND state = 'queued' AND priority >= 20;
