-- deferq on PostgreSQL 13+ (transition tables, autovacuum_vacuum_insert_scale_factor),
-- schema version 1.
-- Times are epoch seconds (double precision) by the database clock, the same numbers
-- every deferq backend uses. `seq` is the enqueue order (FIFO among equal due times);
-- it needs no index of its own (claims and purges address rows by ctid), which
-- spares one index entry for each of the three row versions a job writes.
CREATE TABLE {jobs} (
    seq          bigint GENERATED ALWAYS AS IDENTITY,
    id           text PRIMARY KEY,
    task         text NOT NULL,
    payload      jsonb NOT NULL,            -- [args, kwargs]
    queue        text NOT NULL,
    priority     smallint NOT NULL,         -- 0 high, 1 normal, 2 low
    state        text NOT NULL CHECK (state IN ('queued', 'active', 'succeeded', 'dead', 'cancelled')),
    attempts     integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
    timeout      double precision,
    unique_key   text,
    run_at       double precision NOT NULL, -- due time; "scheduled" is queued with run_at > now
    created_at   double precision NOT NULL,
    lease_until  double precision,
    worker       text,
    error        text,
    result       jsonb,
    finished_at  double precision
);

-- The hot path: only waiting rows are in this index, so finished rows never slow a
-- claim down (S3-2); its order is the claim order within one queue and priority.
CREATE INDEX deferq_jobs_waiting ON {jobs} (queue, priority, run_at, seq) WHERE state = 'queued';
-- Expired leases are found among active rows only.
CREATE INDEX deferq_jobs_leased ON {jobs} (lease_until) WHERE state = 'active';
-- One unfinished job per unique key (invariant 7); finished ones free the key.
CREATE UNIQUE INDEX deferq_jobs_live_key ON {jobs} (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('queued', 'active');
CREATE INDEX deferq_jobs_key ON {jobs} (unique_key, seq) WHERE unique_key IS NOT NULL;
-- Purges and listings of finished jobs.
CREATE INDEX deferq_jobs_finished ON {jobs} (state, finished_at) WHERE finished_at IS NOT NULL;

-- A queue table churns: every job is inserted, updated 2-3 times and deleted. Vacuum
-- it after 1% of its rows changed (the default waits for 20%), without throttling, so
-- dead tuples stay few and claims stay fast.
ALTER TABLE {jobs} SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

CREATE TABLE {kv} (
    namespace  text NOT NULL,
    key        text NOT NULL,
    value      bytea NOT NULL,
    expires_at double precision,
    PRIMARY KEY (namespace, key)
);

-- Wake idle workers (LISTEN "deferq:<schema>") when a job becomes due now, or within
-- the next second: an idle worker sleeps at most a second between looks (its
-- idle_wait), so a job due sooner than that must wake it; one due later is found by
-- that look, and the worker then sleeps until it is due. Bulk enqueues of later jobs
-- notify nobody. The payload is the queue name; PostgreSQL folds identical
-- notifications of one transaction into one, so a batch or a transactional enqueue
-- notifies once per queue, at commit, and a rolled-back transaction notifies nobody.
CREATE FUNCTION {notify_fn}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_LEVEL = 'ROW' THEN
        PERFORM pg_notify('deferq:' || left(TG_TABLE_SCHEMA, 50), NEW.queue);
    ELSE
        PERFORM pg_notify('deferq:' || left(TG_TABLE_SCHEMA, 50), due.queue)
        FROM (SELECT DISTINCT queue FROM new_rows
              WHERE state = 'queued' AND run_at <= date_part('epoch', now()) + 1) AS due;
    END IF;
    RETURN NULL;
END $$;

-- Inserts: once per statement, over the inserted rows.
CREATE TRIGGER deferq_jobs_notify_insert AFTER INSERT ON {jobs}
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {notify_fn}();
-- Updates (retry soon, release, recovered lease, retried dead job): a row trigger whose
-- WHEN is checked without calling the function, so claims and settles cost nothing.
CREATE TRIGGER deferq_jobs_notify_update AFTER UPDATE ON {jobs} FOR EACH ROW
    WHEN (NEW.state = 'queued' AND OLD.state <> 'queued' AND NEW.run_at <= date_part('epoch', now()) + 1)
    EXECUTE FUNCTION {notify_fn}();
