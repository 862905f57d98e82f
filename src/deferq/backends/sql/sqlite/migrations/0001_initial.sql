-- deferq on SQLite, schema version 1. Times are epoch seconds (REAL) by this machine's
-- clock. The unique key column is `key` here (`unique_key` on PostgreSQL and MySQL).
-- IF NOT EXISTS everywhere: files made before the migrations table (their schema was
-- marked with PRAGMA user_version = 1) hold exactly these tables and indexes, so
-- applying this migration to them changes nothing and records it as applied.
CREATE TABLE IF NOT EXISTS {jobs} (
    seq          INTEGER PRIMARY KEY,   -- enqueue order: FIFO among equal due times
    id           TEXT NOT NULL UNIQUE,
    task         TEXT NOT NULL,
    payload      BLOB NOT NULL,         -- JSON [args, kwargs]
    queue        TEXT NOT NULL,
    priority     INTEGER NOT NULL,      -- 0 high, 1 normal, 2 low
    state        TEXT NOT NULL,         -- queued (waiting) | active | succeeded | dead | cancelled
    attempts     INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    timeout      REAL,
    key          TEXT,
    run_at       REAL NOT NULL,         -- due time; "scheduled" is queued with run_at > now
    created_at   REAL NOT NULL,
    lease_until  REAL,
    worker       TEXT,
    error        TEXT,
    result       BLOB,
    finished_at  REAL
);

-- The hot path: only waiting rows are in this index, so finished rows never slow a
-- claim down (S3-2); its order is the claim order within one queue and priority.
CREATE INDEX IF NOT EXISTS deferq_jobs_waiting
    ON {jobs} (queue, priority, run_at, seq) WHERE state = 'queued';
-- Expired leases are found among active rows only.
CREATE INDEX IF NOT EXISTS deferq_jobs_leased
    ON {jobs} (lease_until) WHERE state = 'active';
-- One unfinished job per unique key (invariant 7); finished ones free the key.
CREATE UNIQUE INDEX IF NOT EXISTS deferq_jobs_live_key
    ON {jobs} (key) WHERE key IS NOT NULL AND state IN ('queued', 'active');
CREATE INDEX IF NOT EXISTS deferq_jobs_key ON {jobs} (key, seq) WHERE key IS NOT NULL;
-- Purges and listings of finished jobs.
CREATE INDEX IF NOT EXISTS deferq_jobs_finished
    ON {jobs} (state, finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS {kv} (
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      BLOB NOT NULL,
    expires_at REAL,
    PRIMARY KEY (namespace, key)
);
