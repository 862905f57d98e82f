-- deferq on SQLite, schema version 10: dependencies (options(after=...), chains, chords).
-- One row per edge still to settle: the child waits, stored 'blocked', while it has
-- any; a parent's edges are taken away, each exactly once, when it finishes.
CREATE TABLE IF NOT EXISTS {deps} (
    parent    TEXT NOT NULL,
    child     TEXT NOT NULL,
    after_any INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (parent, child)
);
CREATE INDEX IF NOT EXISTS deferq_deps_child ON {deps} (child);
