-- deferq on MySQL / MariaDB, schema version 6: pausing a queue (app.pause). A row per
-- paused queue; the claims and the next-due look-up pass over its jobs while the row
-- exists.
CREATE TABLE IF NOT EXISTS {paused} (
    queue     VARCHAR(100) NOT NULL PRIMARY KEY,
    paused_at DOUBLE NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
