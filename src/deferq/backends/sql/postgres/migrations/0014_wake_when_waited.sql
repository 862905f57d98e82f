-- deferq on PostgreSQL, schema version 14: an enqueue notifies idle workers only when
-- one waits. The enqueue statements do it themselves (queries.sql, wake_waiters), so
-- the insert trigger goes: an enqueue while no worker waits pays for no trigger and no
-- notification. Updates that make a job due (a retry soon, a release, a recovered
-- lease, a retried dead job, a job stepping up) still notify through the row trigger.
DROP TRIGGER deferq_jobs_notify_insert ON {jobs};
CREATE OR REPLACE FUNCTION {notify_fn}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('deferq:' || left(TG_TABLE_SCHEMA, 50), NEW.queue);
    RETURN NULL;
END $$;
