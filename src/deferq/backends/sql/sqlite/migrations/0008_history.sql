-- deferq on SQLite, schema version 8: the per-minute history (deferq/history.py). One
-- counter per (minute, queue, task, field), only ever added to; the key leads with the
-- minute, so a window is one range and a prune deletes from the front.
CREATE TABLE IF NOT EXISTS {history} (
    minute INTEGER NOT NULL,   -- epoch seconds // 60
    queue  TEXT NOT NULL,
    task   TEXT NOT NULL,
    field  TEXT NOT NULL,      -- a count (enqueued, succeeded, ...) or a histogram bucket (w12, r7)
    amount INTEGER NOT NULL,
    PRIMARY KEY (minute, queue, task, field)
) WITHOUT ROWID;
