-- deferq on MySQL 5.7+ / MariaDB 10.3+, schema version 1. Same columns as on
-- PostgreSQL (times are epoch seconds by the database clock); what differs is noted.
-- DDL commits by itself on MySQL, so each statement here stands alone, and may run
-- again if the migration was cut off half-way (IF NOT EXISTS).
CREATE TABLE IF NOT EXISTS {jobs} (
    seq          BIGINT NOT NULL AUTO_INCREMENT,   -- enqueue order
    id           VARCHAR(64) NOT NULL,
    task         VARCHAR(255) NOT NULL,
    payload      LONGTEXT NOT NULL,                -- JSON [args, kwargs]
    queue        VARCHAR(100) NOT NULL,
    priority     TINYINT NOT NULL,                 -- 0 high, 1 normal, 2 low
    state        VARCHAR(16) NOT NULL,             -- queued | active | succeeded | dead | cancelled
    attempts     INT NOT NULL DEFAULT 0,
    max_attempts INT NOT NULL,
    timeout      DOUBLE NULL,
    unique_key   VARCHAR(255) NULL,
    -- No partial indexes in MySQL: the unique key of an unfinished job is copied into a
    -- generated column that is NULL once the job finishes, and that column is unique
    -- (NULLs never collide). Same rule as PostgreSQL's partial unique index.
    live_key     VARCHAR(255) AS (CASE WHEN state IN ('queued', 'active') THEN unique_key END) STORED,
    run_at       DOUBLE NOT NULL,                  -- due time; "scheduled" is queued with run_at > now
    created_at   DOUBLE NOT NULL,
    lease_until  DOUBLE NULL,
    worker       VARCHAR(255) NULL,
    claim_token  VARCHAR(32) NULL,                 -- "update first, then select what I own" claims
    error        TEXT NULL,
    result       LONGTEXT NULL,
    finished_at  DOUBLE NULL,
    PRIMARY KEY (seq),
    UNIQUE KEY deferq_jobs_id (id),
    UNIQUE KEY deferq_jobs_live_key (live_key),
    -- The hot path. No partial index either, so `state` leads: waiting rows form one
    -- contiguous range, read in claim order, and finished rows (other states) lie
    -- outside it however many there are (S3-2).
    -- Its `state = 'active'` prefix also finds expired leases: active rows are few
    -- (one per running job), so a separate lease index would only cost every claim.
    KEY deferq_jobs_waiting (state, queue, priority, run_at, seq),
    KEY deferq_jobs_key (unique_key, seq),
    KEY deferq_jobs_finished (state, finished_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- utf8mb4_bin: keys and queue names compare by code point (but PAD SPACE: 0015).
CREATE TABLE IF NOT EXISTS {kv} (
    namespace  VARCHAR(191) NOT NULL,
    `key`      VARCHAR(191) NOT NULL,
    value      LONGBLOB NOT NULL,
    expires_at DOUBLE NULL,
    PRIMARY KEY (namespace, `key`)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
