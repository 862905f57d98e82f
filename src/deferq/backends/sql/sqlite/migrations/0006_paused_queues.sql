-- deferq on SQLite, schema version 6: pausing a queue (app.pause). A row per paused
-- queue; the claims and the next-due look-up pass over its jobs while the row exists.
CREATE TABLE {paused} (
    queue     TEXT PRIMARY KEY,
    paused_at REAL NOT NULL
);
