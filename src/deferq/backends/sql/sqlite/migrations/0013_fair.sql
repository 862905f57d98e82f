-- deferq on SQLite, schema version 13: fair queues (options(fair_key=...), fair.py). A
-- job's fair key, and its virtual time while it waits at its fair level (priority + 10),
-- claimed in (virtual time, seq) order through deferq_jobs_fair; {fair} holds each key's
-- next virtual time per queue and level. NULL for every job stored before this version.
ALTER TABLE {jobs} ADD COLUMN fair_key TEXT;
ALTER TABLE {jobs} ADD COLUMN vtime REAL;
CREATE INDEX IF NOT EXISTS deferq_jobs_fair
    ON {jobs} (queue, priority, vtime, seq) WHERE state = 'queued' AND vtime IS NOT NULL;
CREATE TABLE IF NOT EXISTS {fair} (
    queue      TEXT NOT NULL,
    priority   INTEGER NOT NULL,
    fair_key   TEXT NOT NULL,
    next_vtime REAL NOT NULL,
    PRIMARY KEY (queue, priority, fair_key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS deferq_fair_reached ON {fair} (queue, priority, next_vtime);
