-- deferq on PostgreSQL, schema version 13: fair queues (options(fair_key=...), fair.py).
-- A job's fair key, and its virtual time while it waits at its fair level (priority +
-- 10), claimed in (virtual time, seq) order through deferq_jobs_fair; {fair} holds each
-- key's next virtual time per queue and level. Nullable columns without a default are
-- added without rewriting the table; NULL for every job stored before this version.
ALTER TABLE {jobs} ADD COLUMN fair_key text, ADD COLUMN vtime float8;
CREATE INDEX deferq_jobs_fair ON {jobs} (queue, priority, vtime, seq)
    WHERE state = 'queued' AND vtime IS NOT NULL;
CREATE TABLE {fair} (
    queue      text NOT NULL,
    priority   smallint NOT NULL,
    fair_key   text NOT NULL,
    next_vtime float8 NOT NULL,
    PRIMARY KEY (queue, priority, fair_key)
);
CREATE INDEX deferq_fair_reached ON {fair} (queue, priority, next_vtime);
