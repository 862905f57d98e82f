-- deferq on PostgreSQL, schema version 16: the jobs a limit holds (a rate's turn, a
-- pause), noted as they snooze, so that the limit's clear, resume or new rate makes them
-- due at once (limits/__init__.py). A row per (limit name, job): the due time the snooze
-- gave it; rows whose time has come leave as the name's next ones are written.
CREATE TABLE {holds} (
    name   text NOT NULL,
    job_id text NOT NULL,
    due    double precision NOT NULL,
    PRIMARY KEY (name, job_id)
);
CREATE INDEX deferq_holds_due ON {holds} (name, due);
