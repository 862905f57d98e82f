-- deferq on PostgreSQL, schema version 4: expiry (options(expires=...)). A job
-- not started by this time is never run: the claim that reaches it cancels it
-- ("expired") instead of leasing it. NULL: never expires.
ALTER TABLE {jobs} ADD COLUMN expires_at double precision;
