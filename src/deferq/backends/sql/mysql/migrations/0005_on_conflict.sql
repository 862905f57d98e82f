-- deferq on MySQL / MariaDB, schema version 5: on_conflict replace / debounce. A job
-- enqueued with a key whose holder is running waits behind it, stored with its
-- priority raised by 20 (base.BEHIND): out of the claims' reach, and not the key's
-- holder. So live_key names holders only (priority < 20), and behind_key, unique as
-- well, allows one job waiting behind each key. One statement: a cut-off migration
-- leaves the table as it was.
ALTER TABLE {jobs}
    DROP INDEX deferq_jobs_live_key,
    MODIFY live_key VARCHAR(255)
        AS (CASE WHEN state IN ('queued', 'active') AND priority < 20 THEN unique_key END) STORED,
    ADD COLUMN behind_key VARCHAR(255)
        AS (CASE WHEN state = 'queued' AND priority >= 20 THEN unique_key END) STORED,
    ADD UNIQUE KEY deferq_jobs_live_key (live_key),
    ADD UNIQUE KEY deferq_jobs_behind (behind_key);
