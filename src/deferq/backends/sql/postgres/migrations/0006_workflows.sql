-- deferq on PostgreSQL, schema version 6: waiting for results. A job that finishes
-- (succeeded, dead, cancelled) notifies "deferq_done:<schema>", where `job.wait()`
-- listens; the payload is empty, so PostgreSQL folds a batch of settles into one
-- notification at commit. The WHEN is checked without calling the function: claims,
-- heartbeats and retries cost nothing.
CREATE FUNCTION {schema_prefix}deferq_notify_done() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('deferq_done:' || left(TG_TABLE_SCHEMA, 45), '');
    RETURN NULL;
END $$;

CREATE TRIGGER deferq_jobs_notify_done AFTER UPDATE ON {jobs} FOR EACH ROW
    WHEN (NEW.state IN ('succeeded', 'dead', 'cancelled') AND OLD.state <> NEW.state)
    EXECUTE FUNCTION {schema_prefix}deferq_notify_done();
