-- deferq on MySQL / MariaDB, schema version 16: the jobs a limit holds (a rate's turn, a
-- pause), noted as they snooze, so that the limit's clear, resume or new rate makes them
-- due at once (limits/__init__.py). A row per (limit name, job): the due time the snooze
-- gave it; rows whose time has come leave as the name's next ones are written.
CREATE TABLE IF NOT EXISTS {holds} (
    name   VARCHAR(191) NOT NULL,
    job_id VARCHAR(64) NOT NULL,
    due    DOUBLE NOT NULL,
    PRIMARY KEY (name, job_id),
    KEY deferq_holds_due (name, due)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = {exact};
