-- deferq on MySQL, schema version 9: listing jobs at scale (backends/search.py). A
-- page of a filtered list is one range of one of these, newest (highest seq) first.
-- MySQL has no substring index: a text search scans a window of the newest jobs.
CREATE INDEX deferq_jobs_state ON {jobs} (state, seq);
CREATE INDEX deferq_jobs_queue_state ON {jobs} (queue, state, seq);
CREATE INDEX deferq_jobs_task_state ON {jobs} (task, state, seq);
