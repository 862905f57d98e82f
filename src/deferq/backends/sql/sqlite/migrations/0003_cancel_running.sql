-- deferq on SQLite, schema version 3: cancelling a running job. app.cancel(id) on
-- an active job sets this (when it was asked); the job's worker hears it at its next
-- heartbeat and stops the task, and no outcome but success puts the job anywhere but
-- cancelled. NULL: nobody asked.
ALTER TABLE {jobs} ADD COLUMN cancel_requested_at REAL;
