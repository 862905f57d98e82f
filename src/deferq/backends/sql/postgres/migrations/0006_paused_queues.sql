-- deferq on PostgreSQL, schema version 6: pausing a queue (app.pause). A row per
-- paused queue; the claims and the next-due look-up pass over its jobs while the row
-- exists.
CREATE TABLE {paused} (
    queue     text PRIMARY KEY,
    paused_at double precision NOT NULL
);
