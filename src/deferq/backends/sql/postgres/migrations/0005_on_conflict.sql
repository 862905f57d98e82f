-- deferq on PostgreSQL, schema version 5: on_conflict replace / debounce. A job
-- enqueued with a key whose holder is running waits behind it, stored with its
-- priority raised by 20 (base.BEHIND): out of the claims' reach, and not the key's
-- holder. So the key index counts holders only (priority < 20), and a second index
-- allows one job waiting behind each key. Enqueues skip a conflict on either
-- (ON CONFLICT DO NOTHING, without a target).
DROP INDEX {schema_prefix}deferq_jobs_live_key;
CREATE UNIQUE INDEX deferq_jobs_live_key ON {jobs} (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('queued', 'active') AND priority < 20;
CREATE UNIQUE INDEX deferq_jobs_behind ON {jobs} (unique_key)
    WHERE unique_key IS NOT NULL AND state = 'queued' AND priority >= 20;

-- A job stepping up (its priority lowered back to a level claims read) is new work
-- for idle workers, as a job becoming queued is.
DROP TRIGGER deferq_jobs_notify_update ON {jobs};
CREATE TRIGGER deferq_jobs_notify_update AFTER UPDATE ON {jobs} FOR EACH ROW
    WHEN (NEW.state = 'queued' AND (OLD.state <> 'queued' OR OLD.priority >= 10 AND NEW.priority < 10)
          AND NEW.run_at <= date_part('epoch', now()) + 1)
    EXECUTE FUNCTION {notify_fn}();
