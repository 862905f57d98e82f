-- deferq on PostgreSQL, schema version 12: a job's tags (options(tags=...)), a JSON
-- array of texts; NULL when it has none, as every job stored before this version.
-- A nullable column without a default is added without rewriting the table.
ALTER TABLE {jobs} ADD COLUMN tags text;
