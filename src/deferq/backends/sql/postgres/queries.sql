-- deferq's queries on PostgreSQL. Parameters are %(name)s (psycopg); {jobs}, {kv},
-- {migrations} are the tables (schema-qualified with ?schema=), {now} the clock.
-- Differences from mysql/queries.sql are noted where they occur.

-- name: now
-- The database clock as epoch seconds. now() is the transaction's start: one
-- statement sees one instant.
date_part('epoch', now())

-- name: job_columns
-- Every job read returns these, in this order (common.py decodes them). Reading jsonb
-- as text costs the same as its normal output and leaves decoding to orjson.
id, task, payload::text, queue, priority, state, attempts, max_attempts, timeout,
unique_key, run_at, created_at, lease_until, worker, error, result::text, finished_at

-- name: clock
SELECT {now}

-- name: enqueue
-- A whole batch in one statement: one JSON document in (a list of jobs, built by
-- orjson in one call), one row per job, inserted in list order. A job whose key is
-- held by an unfinished job conflicts on the partial unique index and is skipped
-- (MySQL emulates that index with a generated column). RETURNING says which went in.
INSERT INTO {jobs} (id, task, payload, queue, priority, state, max_attempts, timeout,
                    unique_key, run_at, created_at)
SELECT i.id, i.task, i.payload, i.queue, i.priority, 'queued', i.max_attempts, i.timeout,
       i.unique_key, CASE WHEN i.run_at > 0 THEN i.run_at ELSE {now} + i.delay END, {now}
FROM ROWS FROM (jsonb_to_recordset(%(jobs)s::jsonb) AS (
         id text, task text, payload jsonb, queue text, priority smallint, max_attempts int,
         timeout float8, unique_key text, run_at float8, delay float8))
     WITH ORDINALITY AS i(id, task, payload, queue, priority, max_attempts, timeout, unique_key,
                          run_at, delay, n)
ORDER BY i.n
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('queued', 'active') DO NOTHING
RETURNING id, run_at, created_at

-- name: enqueue_one
-- The same for one job, the commonest call: plain values plan and bind faster than
-- a document to unpack (a third less time per single enqueue, measured).
INSERT INTO {jobs} (id, task, payload, queue, priority, state, max_attempts, timeout,
                    unique_key, run_at, created_at)
VALUES (%(id)s, %(task)s, %(payload)s::jsonb, %(queue)s, %(priority)s, 'queued',
        %(max_attempts)s, %(timeout)s, %(unique_key)s,
        CASE WHEN %(run_at)s > 0 THEN %(run_at)s ELSE {now} + %(delay)s END, {now})
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('queued', 'active') DO NOTHING
RETURNING id, run_at, created_at

-- name: live_by_keys
SELECT {job_columns}, {now} FROM {jobs}
WHERE unique_key = ANY(%(keys)s::text[]) AND state IN ('queued', 'active')

-- name: claim
-- Lease up to %(limit)s due jobs of ONE queue. Priorities are tried in the caller's
-- order (a lateral join over the array, read lazily: the next level is only scanned
-- when the previous one ran short). Each level is one range of the partial index
-- deferq_jobs_waiting, read in claim order; SKIP LOCKED passes over rows another
-- worker is claiming right now instead of waiting for it. The rows are then updated
-- by ctid (their address, stable while locked): no second index look-up.
UPDATE {jobs} SET state = 'active', attempts = attempts + 1, worker = %(worker)s,
                  lease_until = {now} + %(lease)s
WHERE ctid = ANY(ARRAY(
    SELECT c.ctid
    FROM unnest(%(priorities)s::smallint[]) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT ctid FROM {jobs}
        WHERE state = 'queued' AND queue = %(queue)s AND priority = p.priority AND run_at <= {now}
        ORDER BY run_at, seq
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS c
    LIMIT %(limit)s))
RETURNING {job_columns}, {now}, seq

-- name: claim_queues
-- The same over several queues: each queue's range is read in order and the ranges
-- are merged by due time. A level may lock up to %(limit)s rows per queue and lease
-- only %(limit)s of them; the others are free again at commit, a moment later.
-- (`queue = ANY(array)` on the index would need a sort of every due row instead.)
UPDATE {jobs} SET state = 'active', attempts = attempts + 1, worker = %(worker)s,
                  lease_until = {now} + %(lease)s
WHERE ctid = ANY(ARRAY(
    SELECT m.ctid
    FROM unnest(%(priorities)s::smallint[]) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT c.ctid
        FROM unnest(%(queues)s::text[]) AS q(queue)
        CROSS JOIN LATERAL (
            SELECT ctid, run_at, seq FROM {jobs}
            WHERE state = 'queued' AND queue = q.queue AND priority = p.priority
              AND run_at <= {now}
            ORDER BY run_at, seq
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS c
        ORDER BY c.run_at, c.seq
        LIMIT %(limit)s
    ) AS m
    LIMIT %(limit)s))
RETURNING {job_columns}, {now}, seq

-- name: heartbeat
-- A batch in one statement (arrays in, one element per job), fenced by (worker,
-- attempts): a lease that changed hands is not extended. RETURNING names the ones
-- that applied. MySQL runs one fenced UPDATE per job instead.
UPDATE {jobs} AS j SET lease_until = {now} + f.lease
FROM unnest(%(id)s::text[], %(worker)s::text[], %(attempts)s::int[], %(lease)s::float8[])
     AS f(id, worker, attempts, lease)
WHERE j.id = f.id AND j.state = 'active' AND j.worker = f.worker AND j.attempts = f.attempts
RETURNING j.id

-- name: settle
-- A batch of outcomes, fenced like heartbeat. o.state is the new stored state; the
-- CASEs keep the columns an outcome does not touch (memory.py's _settled, in SQL).
UPDATE {jobs} AS j SET
    state = o.state,
    attempts = j.attempts - o.released,
    run_at = CASE WHEN o.kind = 'retry' THEN {now} + o.delay ELSE j.run_at END,
    error = CASE WHEN o.kind IN ('retry', 'dead') THEN o.error ELSE j.error END,
    result = CASE WHEN o.kind = 'succeeded' THEN o.result::jsonb ELSE j.result END,
    finished_at = CASE WHEN o.state IN ('succeeded', 'dead') THEN {now} END,
    worker = NULL,
    lease_until = NULL
FROM unnest(%(id)s::text[], %(worker)s::text[], %(attempts)s::int[], %(kind)s::text[],
            %(state)s::text[], %(released)s::int[], %(delay)s::float8[], %(error)s::text[],
            %(result)s::text[])
     AS o(id, worker, attempts, kind, state, released, delay, error, result)
WHERE j.id = o.id AND j.state = 'active' AND j.worker = o.worker AND j.attempts = o.attempts
RETURNING j.id

-- name: recover_expired
UPDATE {jobs} SET
    state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'queued' END,
    finished_at = CASE WHEN attempts >= max_attempts THEN {now} END,
    error = 'lease expired (worker ' || worker || ' stopped heartbeating)',
    worker = NULL,
    lease_until = NULL
WHERE state = 'active' AND lease_until < {now}

-- name: next_due
-- The earliest due time among waiting jobs of the queues: one index probe per queue
-- and priority (a plain min() over `queue = ANY` would read every waiting row).
SELECT min(d.run_at), {now}
FROM unnest(%(queues)s::text[]) AS q(queue)
CROSS JOIN unnest(ARRAY[0, 1, 2]::smallint[]) AS p(priority)
CROSS JOIN LATERAL (
    SELECT run_at FROM {jobs}
    WHERE state = 'queued' AND queue = q.queue AND priority = p.priority
    ORDER BY run_at LIMIT 1
) AS d

-- name: get
SELECT {job_columns}, {now} FROM {jobs} WHERE id = %(id)s

-- name: get_by_key
SELECT {job_columns}, {now} FROM {jobs} WHERE unique_key = %(key)s ORDER BY seq DESC LIMIT 1

-- name: cancel
UPDATE {jobs} SET state = 'cancelled', finished_at = {now} WHERE id = %(id)s AND state = 'queued'

-- name: retry_dead
-- Back to the end of the line: a fresh seq. Fails on deferq_jobs_live_key when a newer
-- job holds its key (the caller answers False). MySQL keeps the old seq (see there).
UPDATE {jobs} SET state = 'queued', attempts = 0, run_at = {now}, finished_at = NULL,
                  seq = DEFAULT
WHERE id = %(id)s AND state = 'dead'

-- name: list_scheduled
SELECT {job_columns}, {now} FROM {jobs}
WHERE state = 'queued' AND run_at > {now} AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY run_at DESC, seq DESC LIMIT %(limit)s

-- name: list_queued
SELECT {job_columns}, {now} FROM {jobs}
WHERE state = 'queued' AND run_at <= {now} AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY run_at DESC, seq DESC LIMIT %(limit)s

-- name: list_active
SELECT {job_columns}, {now} FROM {jobs}
WHERE state = 'active' AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY run_at DESC, seq DESC LIMIT %(limit)s

-- name: list_finished
SELECT {job_columns}, {now} FROM {jobs}
WHERE state = %(state)s AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY finished_at DESC, seq DESC LIMIT %(limit)s

-- name: purge
-- In slices, so a purge of a million rows is many short transactions, never one long
-- one (which would hold back vacuum). PostgreSQL's DELETE has no LIMIT; MySQL's has.
DELETE FROM {jobs} WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM {jobs}
    WHERE state = ANY(%(states)s::text[]) AND finished_at <= {now} - %(older_than)s
    LIMIT %(batch)s))

-- name: stats
SELECT queue,
       CASE WHEN state = 'queued' AND run_at > {now} THEN 'scheduled' ELSE state END AS shown,
       count(*),
       max(CASE WHEN state = 'queued' AND run_at <= {now} THEN {now} - run_at END)
FROM {jobs} GROUP BY 1, 2

-- name: kv_put
INSERT INTO {kv} (namespace, key, value, expires_at)
VALUES (%(namespace)s, %(key)s, %(value)s, {now} + %(ttl)s::float8)
ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at

-- name: kv_delete_expired
DELETE FROM {kv} WHERE namespace = %(namespace)s AND key = %(key)s AND expires_at <= {now}

-- name: kv_insert_new
INSERT INTO {kv} (namespace, key, value, expires_at)
VALUES (%(namespace)s, %(key)s, %(value)s, {now} + %(ttl)s::float8)
ON CONFLICT (namespace, key) DO NOTHING

-- name: kv_get
SELECT value FROM {kv}
WHERE namespace = %(namespace)s AND key = %(key)s AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_delete
DELETE FROM {kv}
WHERE namespace = %(namespace)s AND key = %(key)s AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_list
SELECT key, value FROM {kv}
WHERE namespace = %(namespace)s AND (expires_at IS NULL OR expires_at > {now})

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS {migrations} (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at double precision NOT NULL
)

-- name: applied_migrations
SELECT version FROM {migrations} ORDER BY version

-- name: record_migration
INSERT INTO {migrations} (version, name, applied_at) VALUES (%(version)s, %(name)s, {now})
