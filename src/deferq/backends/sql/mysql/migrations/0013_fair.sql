-- deferq on MySQL / MariaDB, schema version 13: fair queues (options(fair_key=...),
-- fair.py). A job's fair key, and its virtual time while it waits at its fair level
-- (priority + 10), claimed in (virtual time, seq) order through deferq_jobs_fair; {fair}
-- holds each key's next virtual time per queue and level. NULL for every job stored
-- before this version. The index has no `state` (no partial indexes here): a job keeps
-- a virtual time only while it waits at its fair level (queries.sql, leave_fair).
ALTER TABLE {jobs}
    ADD COLUMN fair_key VARCHAR(200) NULL,
    ADD COLUMN vtime DOUBLE NULL,
    ADD KEY deferq_jobs_fair (queue, priority, vtime, seq);
CREATE TABLE IF NOT EXISTS {fair} (
    queue      VARCHAR(100) NOT NULL,
    priority   SMALLINT NOT NULL,
    fair_key   VARCHAR(200) NOT NULL,
    next_vtime DOUBLE NOT NULL,
    PRIMARY KEY (queue, priority, fair_key),
    KEY deferq_fair_reached (queue, priority, next_vtime)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
