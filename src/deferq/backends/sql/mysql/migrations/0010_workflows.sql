-- deferq on MySQL / MariaDB, schema version 10: dependencies (options(after=...),
-- chains, chords). One row per edge still to settle: the child waits, stored
-- 'blocked', while it has any; a parent's edges are taken away, each exactly once,
-- when it finishes.
CREATE TABLE IF NOT EXISTS {deps} (
    parent    VARCHAR(64) NOT NULL,
    child     VARCHAR(64) NOT NULL,
    after_any TINYINT NOT NULL DEFAULT 0,
    PRIMARY KEY (parent, child),
    KEY deferq_deps_child (child)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
