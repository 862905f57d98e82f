-- deferq on PostgreSQL, schema version 8: the per-minute history (deferq/history.py).
-- One counter per (minute, queue, task, field), only ever added to; the key leads with
-- the minute, so a window is one range and a prune deletes from the front.
CREATE TABLE {history} (
    minute bigint NOT NULL,   -- epoch seconds // 60
    queue  text NOT NULL,
    task   text NOT NULL,
    field  text NOT NULL,     -- a count (enqueued, succeeded, ...) or a histogram bucket (w12, r7)
    amount bigint NOT NULL,
    PRIMARY KEY (minute, queue, task, field)
);
