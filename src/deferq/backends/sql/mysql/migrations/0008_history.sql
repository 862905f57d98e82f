-- deferq on MySQL, schema version 8: the per-minute history (deferq/history.py). One
-- counter per (minute, queue, task, field), only ever added to; the key leads with the
-- minute, so a window is one range and a prune deletes from the front.
CREATE TABLE {history} (
    minute BIGINT NOT NULL,          -- epoch seconds // 60
    queue  VARCHAR(100) NOT NULL,
    task   VARCHAR(255) NOT NULL,
    field  VARCHAR(16) NOT NULL,     -- a count (enqueued, ...) or a histogram bucket (w12, r7)
    amount BIGINT NOT NULL,
    PRIMARY KEY (minute, queue, task, field)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
