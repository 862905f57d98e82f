-- deferq on SQLite, schema version 7: listing and searching jobs at scale
-- (backends/search.py). A page of a filtered list is one range of an index, newest
-- first (an index ends with the rowid, seq, so (state) orders by seq within a state).
CREATE INDEX IF NOT EXISTS deferq_jobs_state ON {jobs} (state);
CREATE INDEX IF NOT EXISTS deferq_jobs_queue_state ON {jobs} (queue, state);
CREATE INDEX IF NOT EXISTS deferq_jobs_task_state ON {jobs} (task, state);

-- Text in the arguments, the error and the unique key, found as a substring (trigrams, without case)
-- by FTS5 over the jobs table (external content: the text is not stored twice). The
-- triggers keep it in step; a settle that leaves these columns alone costs nothing.
CREATE VIRTUAL TABLE IF NOT EXISTS {jobs_fts} USING fts5(payload, error, key, content='{jobs}', content_rowid='seq',
    tokenize='trigram');
INSERT INTO {jobs_fts} ({jobs_fts}) VALUES ('rebuild');
CREATE TRIGGER IF NOT EXISTS deferq_jobs_fts_insert AFTER INSERT ON {jobs} BEGIN INSERT INTO {jobs_fts} (rowid, payload, error, key) VALUES (new.seq, new.payload, new.error, new.key); END;
CREATE TRIGGER IF NOT EXISTS deferq_jobs_fts_delete AFTER DELETE ON {jobs} BEGIN INSERT INTO {jobs_fts} ({jobs_fts}, rowid, payload, error, key) VALUES ('delete', old.seq, old.payload, old.error, old.key); END;
CREATE TRIGGER IF NOT EXISTS deferq_jobs_fts_update AFTER UPDATE OF payload, error, key ON {jobs} WHEN old.payload IS NOT new.payload OR old.error IS NOT new.error OR old.key IS NOT new.key BEGIN INSERT INTO {jobs_fts} ({jobs_fts}, rowid, payload, error, key) VALUES ('delete', old.seq, old.payload, old.error, old.key); INSERT INTO {jobs_fts} (rowid, payload, error, key) VALUES (new.seq, new.payload, new.error, new.key); END;
