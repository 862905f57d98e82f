-- deferq on SQLite, schema version 9: listing and searching jobs at scale
-- (backends/search.py). A page of a filtered list is one range of an index, newest
-- first (an index ends with the rowid, seq, so (state) orders by seq within a state).
CREATE INDEX IF NOT EXISTS deferq_jobs_state ON {jobs} (state);
CREATE INDEX IF NOT EXISTS deferq_jobs_queue_state ON {jobs} (queue, state);
CREATE INDEX IF NOT EXISTS deferq_jobs_task_state ON {jobs} (task, state);

-- Text in the arguments, the error and the unique key, found as a substring (trigrams,
-- without case) by FTS5. Indexed asynchronously: tokenizing on every insert tripled the
-- cost of an enqueue, so the triggers only note which rows changed (one small insert),
-- and sqlite.py indexes them in batches (`index_text`): at each worker's maintenance
-- (recover_expired) and before a text search.
CREATE VIRTUAL TABLE IF NOT EXISTS {jobs_fts} USING fts5(text, tokenize='trigram');
CREATE TABLE IF NOT EXISTS {jobs_fts_pending} (seq INTEGER PRIMARY KEY);
INSERT OR IGNORE INTO {jobs_fts_pending} (seq) SELECT seq FROM {jobs};
CREATE TRIGGER IF NOT EXISTS deferq_jobs_fts_insert AFTER INSERT ON {jobs} BEGIN INSERT OR IGNORE INTO {jobs_fts_pending} (seq) VALUES (new.seq); END;
CREATE TRIGGER IF NOT EXISTS deferq_jobs_fts_delete AFTER DELETE ON {jobs} BEGIN INSERT OR IGNORE INTO {jobs_fts_pending} (seq) VALUES (old.seq); END;
CREATE TRIGGER IF NOT EXISTS deferq_jobs_fts_update AFTER UPDATE OF payload, error, key ON {jobs} WHEN old.payload IS NOT new.payload OR old.error IS NOT new.error OR old.key IS NOT new.key BEGIN INSERT OR IGNORE INTO {jobs_fts_pending} (seq) VALUES (new.seq); END;
