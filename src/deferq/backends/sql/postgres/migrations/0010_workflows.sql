-- deferq on PostgreSQL, schema version 10: waiting for results. A job that finishes
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

-- Dependencies (options(after=...), chains, chords): one row per edge still to
-- settle. The child waits, stored 'blocked', while it has any; a parent's edges are
-- taken away, each exactly once, when it finishes.
CREATE TABLE {deps} (
    parent    text NOT NULL,
    child     text NOT NULL,
    after_any boolean NOT NULL DEFAULT false,
    PRIMARY KEY (parent, child)
);
CREATE INDEX deferq_deps_child ON {deps} (child);

-- A job waiting for its parents is stored 'blocked': outside the claim index (state =
-- 'queued'), counted and listed as a state of its own.
ALTER TABLE {jobs} DROP CONSTRAINT deferq_jobs_state_check;
ALTER TABLE {jobs} ADD CONSTRAINT deferq_jobs_state_check
    CHECK (state IN ('queued', 'active', 'succeeded', 'dead', 'cancelled', 'blocked'));
