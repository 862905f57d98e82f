-- deferq on SQLite, schema version 15: the jobs a limit holds (a rate's turn, a pause),
-- noted as they snooze, so that the limit's clear, resume or new rate makes them due at
-- once (limits/__init__.py). A row per (limit name, job): the due time the snooze gave
-- it; rows whose time has come leave as the name's next ones are written.
CREATE TABLE IF NOT EXISTS {holds} (
    name   TEXT NOT NULL,
    job_id TEXT NOT NULL,
    due    REAL NOT NULL,
    PRIMARY KEY (name, job_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS deferq_holds_due ON {holds} (name, due);
