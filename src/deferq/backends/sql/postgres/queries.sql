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
unique_key, run_at, created_at, lease_until, worker, error, result::text, finished_at,
progress, progress_message, cancel_requested_at, expires_at, updated_at, remark, last_worker, tags, fair_key, waits_for,
chunk_call

-- name: clock
SELECT {now}

-- name: wait_key
-- The advisory lock key of idle workers: one per jobs table ('dfqw', the table's oid).
1684435319, '{jobs}'::regclass::oid::int4

-- name: wake_waiters
-- The enqueue statements' last column. A job due now or within the second (as the
-- update trigger's, migration 0001) wakes idle workers, but only when one waits: an
-- idle worker holds the wait lock (shared) while it waits (wait_begin), and an enqueue
-- that finds it free takes it itself, exclusive until its commit, and notifies nobody.
-- A worker that starts waiting meanwhile gets the lock only once that commit is
-- visible, and looks at the store after it has the lock: it finds the job. An enqueue
-- that finds the lock taken (a worker waits, or another enqueue's transaction holds
-- it) notifies; PostgreSQL folds identical notifications of a transaction into one,
-- sent at commit, and a rolled-back transaction notifies nobody. The lock is tried at
-- most once a statement (a sub-select without a reference to the row: PostgreSQL
-- evaluates it once, when first needed). {channel}: the literal 'deferq:<schema>' of the
-- jobs table's schema (jobs_schema), put in once a process: looked up here,
-- the catalog join cost every enqueue ~20 µs even when it notified nobody.
CASE WHEN run_at > {now} + 1 OR (SELECT pg_try_advisory_xact_lock({wait_key})) THEN NULL
     ELSE pg_notify({channel}, queue) END

-- name: jobs_schema
-- The schema of the jobs table as this connection finds it, which names the channel
-- idle workers LISTEN on ("deferq:<schema>") and enqueues notify.
SELECT nspname FROM pg_namespace
WHERE oid = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass('{jobs}'))

-- name: wait_begin
-- An idle worker is waiting (on its LISTEN connection): enqueues notify from now on.
-- While an enqueue's transaction holds the lock, this waits for its end (its job is
-- visible by then), at most %(timeout)s (lock_timeout, on this connection only): a
-- longer transaction fails it, and the worker looks at the store and asks again.
SELECT set_config('lock_timeout', %(timeout)s, false), pg_advisory_lock_shared({wait_key})

-- name: wait_end
SELECT pg_advisory_unlock_shared({wait_key})

-- name: enqueue
-- A whole batch in one statement: one JSON document in (a list of jobs, built by
-- orjson in one call), one row per job, inserted in list order. A job whose key is
-- held by an unfinished job conflicts on the partial unique index and is skipped
-- (MySQL emulates that index with a generated column); so is one stored to wait
-- behind a running holder when another already waits there (deferq_jobs_behind).
-- RETURNING says which went in, and wakes idle workers (wake_waiters).
INSERT INTO {jobs} (id, task, payload, queue, priority, state, max_attempts, timeout,
                    unique_key, run_at, created_at, expires_at, remark, tags, fair_key, vtime, updated_at)
SELECT i.id, i.task, i.payload, i.queue, i.priority, 'queued', i.max_attempts, i.timeout,
       i.key, CASE WHEN i.run_at > 0 THEN i.run_at ELSE {now} + i.delay END, {now},
       coalesce(i.expires_at, {now} + i.expires_in), i.remark, i.tags, i.fair_key, i.vtime, {now}
FROM ROWS FROM (jsonb_to_recordset(%(jobs)s::jsonb) AS (
         id text, task text, payload jsonb, queue text, priority smallint, max_attempts int,
         timeout float8, key text, run_at float8, delay float8, expires_at float8,
         expires_in float8, remark text, tags text, fair_key text, vtime float8))
     WITH ORDINALITY AS i(id, task, payload, queue, priority, max_attempts, timeout, key,
                          run_at, delay, expires_at, expires_in, remark, tags, fair_key, vtime, n)
ORDER BY i.n
ON CONFLICT DO NOTHING
RETURNING id, run_at, created_at, {wake_waiters}

-- name: enqueue_one
-- The same for one job, the commonest call: plain values plan and bind faster than
-- a document to unpack (a third less time per single enqueue, measured).
INSERT INTO {jobs} (id, task, payload, queue, priority, state, max_attempts, timeout,
                    unique_key, run_at, created_at, expires_at, remark, tags, fair_key, vtime, updated_at)
VALUES (%(id)s, %(task)s, %(payload)s::jsonb, %(queue)s, %(priority)s, 'queued',
        %(max_attempts)s, %(timeout)s, %(key)s,
        CASE WHEN %(run_at)s > 0 THEN %(run_at)s ELSE {now} + %(delay)s END, {now},
        coalesce(%(expires_at)s::float8, {now} + %(expires_in)s::float8), %(remark)s, %(tags)s,
        %(fair_key)s, %(vtime)s::float8, {now})
ON CONFLICT DO NOTHING
RETURNING id, run_at, created_at, {wake_waiters}

-- name: enqueue_lean
-- One plain job (no unique key, expiry, remark, tags, fair key or absolute due time),
-- due `delay` seconds from now: the commonest single enqueue, with what it leaves
-- empty written as NULL here. Positional, 8 parameters instead of 16: less to bind and
-- send per call. `run_at` is not returned: the caller adds the delay to `created_at`,
-- the same double addition this statement makes.
INSERT INTO {jobs} (id, task, payload, queue, priority, state, max_attempts, timeout,
                    unique_key, run_at, created_at, expires_at, remark, tags, fair_key, updated_at)
VALUES (%s, %s, %s::jsonb, %s, %s, 'queued', %s, %s, NULL, {now} + %s::float8, {now}, NULL, NULL, NULL, NULL,
        {now})
RETURNING created_at, {wake_waiters}

-- name: holders
-- The unfinished jobs with these keys: each key's holder, and a job waiting behind a
-- running holder (on_conflict replace / debounce), told apart by the raw priority
-- (the last column: raised by 20 for the one waiting behind, see base.BEHIND).
SELECT {job_columns}, {now}, priority FROM {jobs}
WHERE unique_key = ANY(%(keys)s::text[]) AND state IN ('queued', 'active')

-- name: replace
-- on_conflict replace / debounce: a waiting job takes the new arguments and due time.
-- Guarded: a job claimed meanwhile is left alone (the backend looks again).
-- A job at its fair level goes back to its plain one, due-time order (fair.py).
UPDATE {jobs} SET payload = %(payload)s::jsonb, run_at = %(run_at)s, updated_at = {now},
                  priority = CASE WHEN mod(priority, 20) >= 10 THEN priority - 10 ELSE priority END, vtime = NULL
WHERE id = %(id)s AND state = 'queued'

-- name: step_up
-- Jobs waiting behind the holder of their key take its place once it is gone: their
-- priority comes back down to a level claims read. While the key has a holder (one
-- retrying, say) they keep waiting.
UPDATE {jobs} AS s SET priority = s.priority - 20
WHERE s.unique_key = ANY(%(keys)s::text[]) AND s.state = 'queued' AND s.priority >= 20
  AND NOT EXISTS (SELECT 1 FROM {jobs} AS h WHERE h.unique_key = s.unique_key
                  AND h.state IN ('queued', 'active') AND h.priority < 20)

-- name: step_up_all
-- The same for every key (the sweep, base.py): one range of deferq_jobs_behind.
UPDATE {jobs} AS s SET priority = s.priority - 20
WHERE s.unique_key IS NOT NULL AND s.state = 'queued' AND s.priority >= 20
  AND NOT EXISTS (SELECT 1 FROM {jobs} AS h WHERE h.unique_key = s.unique_key
                  AND h.state IN ('queued', 'active') AND h.priority < 20)

-- name: lease_or_expire
-- What a claim sets: the lease, except on rows whose expiry has passed, which are
-- cancelled instead ("expired", the attempt not counted); the backend leaves them out.
state = CASE WHEN expires_at <= {now} THEN 'cancelled' ELSE 'active' END,
attempts = CASE WHEN expires_at <= {now} THEN attempts ELSE attempts + 1 END,
worker = CASE WHEN expires_at <= {now} THEN NULL ELSE %(worker)s END,
lease_until = CASE WHEN expires_at <= {now} THEN NULL ELSE {now} + %(lease)s END,
error = CASE WHEN expires_at <= {now} THEN 'expired' ELSE error END,
finished_at = CASE WHEN expires_at <= {now} THEN {now} END,
last_worker = CASE WHEN expires_at <= {now} THEN last_worker ELSE %(worker)s END,
updated_at = {now}

-- name: unpaused
-- A claim's test that the queue %(queue)s is not paused: it names the queue, not the
-- row, so PostgreSQL makes it once per statement (a one-time filter), not per row.
NOT EXISTS (SELECT 1 FROM {paused} WHERE queue = %(queue)s)

-- name: claim
-- Lease up to %(limit)s due jobs of ONE queue. Priorities are tried in the caller's
-- order (a lateral join over the array, read lazily: the next level is only scanned
-- when the previous one ran short). Each level is one range of the partial index
-- deferq_jobs_waiting, read in claim order; SKIP LOCKED passes over rows another
-- worker is claiming right now instead of waiting for it. The rows are then updated
-- by ctid (their address, stable while locked): no second index look-up. The last
-- columns: whether jobs wait for it (its settle then releases them too), its order,
-- and its durable-step checkpoints, [[name, base64 record], ...] or NULL (one range of
-- the records' key: its run reads none of its own, with_checkpoints).
-- A fair level (priority + 10, fair.py) is read in (virtual time, seq) order from
-- deferq_jobs_fair instead: the test on p.priority names no row, so each level runs one
-- branch of the two (a one-time filter), and FOR UPDATE sits in each branch's own
-- subquery (PostgreSQL refuses it beside UNION).
UPDATE {jobs} SET {lease_or_expire}
WHERE ctid = ANY(ARRAY(
    SELECT c.ctid
    FROM unnest(%(priorities)s::smallint[]) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT plain.ctid FROM (
            SELECT ctid FROM {jobs}
            WHERE state = 'queued' AND queue = %(queue)s AND priority = p.priority AND run_at <= {now}
              AND p.priority < 10 AND {unpaused}
            ORDER BY run_at, seq
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED) AS plain
        UNION ALL
        SELECT fair.ctid FROM (
            SELECT ctid FROM {jobs}
            WHERE state = 'queued' AND queue = %(queue)s AND priority = p.priority AND vtime IS NOT NULL
              AND run_at <= {now} AND p.priority >= 10 AND {unpaused}
            ORDER BY vtime, seq
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED) AS fair
    ) AS c
    LIMIT %(limit)s))
RETURNING {job_columns}, {now}, seq, waited_for, priority, coalesce(vtime, run_at),
    (SELECT json_agg(json_build_array(key, encode(value, 'base64'))) FROM {kv}
     WHERE namespace = %(steps)s || id AND (expires_at IS NULL OR expires_at > {now}))

-- name: claim_queues
-- The same over several queues: each queue's range is read in order and the ranges
-- are merged by due time. A level may lock up to %(limit)s rows per queue and lease
-- only %(limit)s of them; the others are free again at commit, a moment later.
-- (`queue = ANY(array)` on the index would need a sort of every due row instead.)
UPDATE {jobs} SET {lease_or_expire}
WHERE ctid = ANY(ARRAY(
    SELECT m.ctid
    FROM unnest(%(priorities)s::smallint[]) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT c.ctid
        FROM unnest(%(queues)s::text[]) AS q(queue)
        CROSS JOIN LATERAL (
            SELECT plain.ctid, plain.run_at AS rank, plain.seq FROM (
                SELECT ctid, run_at, seq FROM {jobs}
                WHERE state = 'queued' AND queue = q.queue AND priority = p.priority
                  AND run_at <= {now} AND p.priority < 10
                ORDER BY run_at, seq
                LIMIT %(limit)s
                FOR UPDATE SKIP LOCKED) AS plain
            UNION ALL
            SELECT fair.ctid, fair.vtime, fair.seq FROM (
                SELECT ctid, vtime, seq FROM {jobs}
                WHERE state = 'queued' AND queue = q.queue AND priority = p.priority AND vtime IS NOT NULL
                  AND run_at <= {now} AND p.priority >= 10
                ORDER BY vtime, seq
                LIMIT %(limit)s
                FOR UPDATE SKIP LOCKED) AS fair
        ) AS c
        WHERE q.queue NOT IN (SELECT queue FROM {paused})
        ORDER BY c.rank, c.seq
        LIMIT %(limit)s
    ) AS m
    LIMIT %(limit)s))
RETURNING {job_columns}, {now}, seq, waited_for, priority, coalesce(vtime, run_at),
    (SELECT json_agg(json_build_array(key, encode(value, 'base64'))) FROM {kv}
     WHERE namespace = %(steps)s || id AND (expires_at IS NULL OR expires_at > {now}))

-- name: fair_floor
-- A fair level's floor (fair.py): the least virtual time waiting there, else the most
-- a key of it has reached. Two index probes.
SELECT coalesce(
    (SELECT vtime FROM {jobs} WHERE state = 'queued' AND queue = %(queue)s AND priority = %(level)s
       AND vtime IS NOT NULL ORDER BY vtime LIMIT 1),
    (SELECT next_vtime FROM {fair} WHERE queue = %(queue)s AND priority = %(level)s
     ORDER BY next_vtime DESC LIMIT 1))

-- name: fair_forget
-- The keys whose next virtual time is behind the floor: they would start at the floor
-- anyway (one range of deferq_fair_reached).
DELETE FROM {fair} WHERE queue = %(queue)s AND priority = %(level)s AND next_vtime < %(floor)s

-- name: fair_next
-- A key's next virtual time at a fair level (no row: it has none), locked until the
-- enqueue commits: two producers of one key take turns.
SELECT next_vtime FROM {fair} WHERE queue = %(queue)s AND priority = %(level)s AND fair_key = %(key)s
FOR UPDATE

-- name: fair_save
-- Keys' next virtual times (arrays, one element per key), never moved back.
INSERT INTO {fair} (queue, priority, fair_key, next_vtime)
SELECT * FROM unnest(%(queue)s::text[], %(level)s::smallint[], %(key)s::text[], %(next)s::float8[])
ON CONFLICT (queue, priority, fair_key) DO UPDATE SET next_vtime = greatest({fair}.next_vtime, excluded.next_vtime)

-- name: heartbeat
-- A batch in one statement (arrays in, one element per job), fenced by (worker,
-- attempts): a lease that changed hands is not extended. RETURNING names the ones
-- that applied, and whether someone asked the job to stop. MySQL runs one fenced
-- UPDATE per job instead. Each job is found by its id (the primary key), one probe a
-- job: `j.state || ''` is no column an index holds, so the planner does not read every
-- active job through deferq_jobs_leased (it estimates them at one, from statistics
-- taken while few ran, and then reads them all, with the entries of every job leased
-- since the last vacuum) to join them with the batch. Measured on settles of 100 jobs
-- of 20,000: 43-47 µs of server CPU a job against 52-60 through the index scan.
UPDATE {jobs} AS j SET lease_until = {now} + f.lease
FROM unnest(%(id)s::text[], %(worker)s::text[], %(attempts)s::int[], %(lease)s::float8[])
     AS f(id, worker, attempts, lease)
WHERE j.id = f.id AND j.state || '' = 'active' AND j.worker = f.worker AND j.attempts = f.attempts
RETURNING j.id, j.cancel_requested_at

-- name: progress
-- What running tasks last reported, a batch in one statement, fenced like heartbeat.
UPDATE {jobs} AS j SET progress = f.progress, progress_message = f.message
FROM unnest(%(id)s::text[], %(worker)s::text[], %(attempts)s::int[], %(progress)s::float8[],
            %(message)s::text[])
     AS f(id, worker, attempts, progress, message)
WHERE j.id = f.id AND j.state || '' = 'active' AND j.worker = f.worker AND j.attempts = f.attempts
RETURNING j.id

-- name: settle
-- A batch of outcomes (`settle_update`), saying which settled jobs others wait for.
{settle_update}
RETURNING j.id, j.state, j.waited_for

-- name: settle_update
-- A batch of outcomes, fenced (and found by id) like heartbeat. o.state is the new stored state; the
-- CASEs keep the columns an outcome does not touch (memory.py's _settled, in SQL). A
-- job whose cancel was requested ends cancelled unless it succeeded (base.py).
UPDATE {jobs} AS j SET
    state = CASE WHEN j.cancel_requested_at IS NOT NULL AND o.state <> 'succeeded' THEN 'cancelled'
                 ELSE o.state END,
    attempts = j.attempts - o.released,
    run_at = CASE WHEN o.kind IN ('retry', 'snooze') THEN coalesce(o.due, {now} + o.delay) ELSE j.run_at END,
    -- due later: a job at its fair level waits at its plain one (fair.py)
    priority = CASE WHEN o.kind IN ('retry', 'snooze') AND j.priority >= 10 THEN j.priority - 10
                    ELSE j.priority END,
    vtime = CASE WHEN o.kind IN ('retry', 'snooze') THEN NULL ELSE j.vtime END,
    error = CASE WHEN o.kind IN ('retry', 'dead', 'cancelled') THEN o.error ELSE j.error END,
    result = CASE WHEN o.kind = 'succeeded' THEN o.result::jsonb ELSE j.result END,
    finished_at = CASE WHEN o.state <> 'queued' OR j.cancel_requested_at IS NOT NULL THEN {now} END,
    waits_for = o.waits_for,
    chunk_call = coalesce(o.chunk_call, j.chunk_call),
    worker = NULL,
    lease_until = NULL,
    updated_at = {now}
FROM unnest(%(id)s::text[], %(worker)s::text[], %(attempts)s::int[], %(kind)s::text[],
            %(state)s::text[], %(released)s::int[], %(delay)s::float8[], %(error)s::text[],
            %(result)s::text[], %(waits_for)s::text[], %(due)s::float8[], %(chunk_call)s::text[])
     AS o(id, worker, attempts, kind, state, released, delay, error, result, waits_for, due, chunk_call)
WHERE j.id = o.id AND j.state || '' = 'active' AND j.worker = o.worker AND j.attempts = o.attempts

-- name: succeed
-- `settle` for a batch of jobs that all succeeded and returned nothing, of one lease
-- holder, attempt and chunk call (a chunk call's jobs; plain jobs' batches): one array
-- of ids, in id order (as `settle`'s), found by id and fenced like it; what `settle`
-- writes for such an outcome, without an element per job for each of its CASEs.
UPDATE {jobs} AS j SET
    state = 'succeeded',
    result = NULL,
    finished_at = {now},
    waits_for = NULL,
    chunk_call = coalesce(%(chunk_call)s, j.chunk_call),
    worker = NULL,
    lease_until = NULL,
    updated_at = {now}
WHERE j.id = ANY(%(ids)s::text[]) AND j.state || '' = 'active' AND j.worker = %(worker)s
  AND j.attempts = %(attempts)s
RETURNING j.id, j.state, j.waited_for

-- name: recover_expired
-- Back to waiting; dead when its attempts are used up; cancelled when that was asked.
-- RETURNING: what each became, for the history (backends/history.py).
UPDATE {jobs} SET
    state = CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
                 WHEN attempts >= max_attempts THEN 'dead' ELSE 'queued' END,
    finished_at = CASE WHEN cancel_requested_at IS NOT NULL OR attempts >= max_attempts THEN {now} END,
    error = 'lease expired (worker ' || worker || ' stopped heartbeating)',
    worker = NULL,
    lease_until = NULL,
    updated_at = {now}
WHERE state = 'active' AND lease_until < {now}
RETURNING queue, task, state

-- name: next_due
-- The earliest due time among waiting jobs of the queues: one index probe per queue
-- and priority (a plain min() over `queue = ANY` would read every waiting row).
SELECT min(d.run_at), {now}
FROM unnest(%(queues)s::text[]) AS q(queue)
CROSS JOIN unnest(ARRAY[0, 1, 2, 10, 11, 12]::smallint[]) AS p(priority)
CROSS JOIN LATERAL (
    SELECT run_at FROM {jobs}
    WHERE state = 'queued' AND queue = q.queue AND priority = p.priority
    ORDER BY run_at LIMIT 1
) AS d
WHERE q.queue NOT IN (SELECT queue FROM {paused})

-- name: get
SELECT {job_columns}, {now} FROM {jobs} WHERE id = %(id)s

-- name: get_by_key
SELECT {job_columns}, {now} FROM {jobs} WHERE unique_key = %(key)s ORDER BY seq DESC LIMIT 1

-- name: window_holder
-- The newest job with a key, in the enqueue's transaction before its insert (the
-- deduplication window: base.py window_plan).
-- FOR UPDATE: a settle of that job waits for this transaction, or this one for the
-- settle (then reads the job as settled), so the check and the insert after it see one state.
SELECT {job_columns}, {now} FROM {jobs} WHERE unique_key = %(key)s ORDER BY seq DESC LIMIT 1 FOR UPDATE

-- name: cancel
-- A waiting job is cancelled; an active one is asked to stop: its worker hears it at
-- its next heartbeat, and its outcome is stored as cancelled.
UPDATE {jobs} SET
    finished_at = CASE WHEN state IN ('queued', 'blocked') THEN {now} ELSE finished_at END,
    cancel_requested_at = CASE WHEN state = 'active' THEN coalesce(cancel_requested_at, {now}) END,
    state = CASE WHEN state IN ('queued', 'blocked') THEN 'cancelled' ELSE state END,
    updated_at = {now}
WHERE id = %(id)s AND state IN ('queued', 'active', 'blocked')

-- name: wake
-- A job waiting for its due time is due now (a durable step's event came, a parent's last
-- child job ended). It wakes an idle worker as an enqueue does (wake_waiters): the update
-- trigger wakes none, as the job was queued already.
UPDATE {jobs} SET run_at = {now}, updated_at = {now}
WHERE id = %(id)s AND state = 'queued' AND run_at > {now}
RETURNING {wake_waiters}

-- name: retry_dead
-- Back to the end of the line: a fresh seq. Fails on deferq_jobs_live_key when a newer
-- job holds its key (the caller answers False). MySQL keeps the old seq (see there).
UPDATE {jobs} SET state = 'queued', attempts = 0, run_at = {now}, finished_at = NULL,
                  updated_at = {now}, seq = DEFAULT
WHERE id = %(id)s AND state = 'dead'

-- name: rerun
-- A finished job (succeeded, dead or cancelled) queued again, due now, its attempts reset,
-- its result and cancel request cleared (a durable job retried from one of its steps). Fails
-- on deferq_jobs_live_key when a newer job holds its key (the caller answers False).
UPDATE {jobs} SET state = 'queued', attempts = 0, run_at = {now}, finished_at = NULL, updated_at = {now},
                  result = NULL, cancel_requested_at = NULL, waits_for = NULL, seq = DEFAULT
WHERE id = %(id)s AND state IN ('succeeded', 'dead', 'cancelled')

-- name: run_now
-- A scheduled job (queued, due later) becomes due now; its attempts are kept.
UPDATE {jobs} SET run_at = {now}, updated_at = {now}
WHERE id = %(id)s AND state = 'queued' AND run_at > {now}

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

-- name: delete
DELETE FROM {jobs} WHERE id = %(id)s AND state IN ('succeeded', 'dead', 'cancelled')

-- name: set_remark
UPDATE {jobs} SET remark = %(remark)s, updated_at = {now} WHERE id = %(id)s

-- name: reseal
-- deferq encryption rotate: an encrypted value (no JSON escapes) replaced where the job
-- still holds it whole: a JSON string in the jsonb columns' text (%(old_json)s, with its
-- quotes), or the whole error or progress message.
UPDATE {jobs} SET payload = replace(payload::text, %(old_json)s, %(new_json)s)::jsonb,
    result = replace(result::text, %(old_json)s, %(new_json)s)::jsonb,
    error = CASE WHEN error = %(old)s THEN %(new)s ELSE error END,
    progress_message = CASE WHEN progress_message = %(old)s THEN %(new)s ELSE progress_message END
WHERE id = %(id)s AND (strpos(payload::text, %(old_json)s) > 0 OR strpos(result::text, %(old_json)s) > 0
    OR error = %(old)s OR progress_message = %(old)s)

-- name: pause
INSERT INTO {paused} (queue, paused_at) VALUES (%(queue)s, {now}) ON CONFLICT DO NOTHING

-- name: resume
-- Idle workers LISTEN on the jobs table's channel: told the queue's name, they look again.
WITH gone AS (DELETE FROM {paused} WHERE queue = %(queue)s RETURNING queue)
SELECT pg_notify('deferq:' || left(n.nspname, 50), gone.queue)
FROM gone, pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass('{jobs}')

-- name: paused
SELECT queue, paused_at FROM {paused}

-- name: kv_put
INSERT INTO {kv} (namespace, key, value, expires_at)
VALUES (%(namespace)s, %(key)s, %(value)s, {now} + %(ttl)s::float8)
ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at

-- name: kv_expire
-- Every live record of a namespace expires ttl seconds from now (a job's checkpoints
-- once it has ended: steps/checkpoints.py).
UPDATE {kv} SET expires_at = {now} + %(ttl)s::float8
WHERE namespace = %(namespace)s AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_expire_many
-- The same for several namespaces (the checkpoints of a settled batch's jobs).
UPDATE {kv} SET expires_at = {now} + %(ttl)s::float8
WHERE namespace = ANY(%(namespaces)s::text[]) AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_delete_expired
DELETE FROM {kv} WHERE namespace = %(namespace)s AND key = %(key)s AND expires_at <= {now}

-- name: kv_insert_new
INSERT INTO {kv} (namespace, key, value, expires_at)
VALUES (%(namespace)s, %(key)s, %(value)s, {now} + %(ttl)s::float8)
ON CONFLICT (namespace, key) DO NOTHING

-- name: kv_put_leased
-- A leased job's own record (a durable step's checkpoint) in one statement: stored only
-- while the job is still this attempt's (fenced like heartbeat, its lease not
-- extended), unless a live record is there (an expired one is replaced). Returns
-- whether the lease held, whether this record was stored, and the record kept before
-- (as this statement began: an insert racing it may leave that NULL, and the caller
-- reads it).
WITH held AS (
    SELECT 1 FROM {jobs}
    WHERE id = %(id)s AND state = 'active' AND worker = %(worker)s AND attempts = %(attempts)s
), stored AS (
    INSERT INTO {kv} AS kv (namespace, key, value, expires_at)
    SELECT %(namespace)s, %(key)s, %(value)s, NULL FROM held
    ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value, expires_at = NULL
    WHERE kv.expires_at <= {now}
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM held), EXISTS (SELECT 1 FROM stored),
       (SELECT value FROM {kv} WHERE namespace = %(namespace)s AND key = %(key)s)

-- name: kv_lock
-- A kv record locked until the transaction ends (rate_take, slot_take): read, then written.
SELECT value, {now} FROM {kv} WHERE namespace = %(namespace)s AND key = %(key)s FOR UPDATE

-- name: kv_swap
-- Compare-and-set: the row count says whether the live record held the expected value.
UPDATE {kv} SET value = %(value)s, expires_at = {now} + %(ttl)s::float8
WHERE namespace = %(namespace)s AND key = %(key)s AND value = %(expected)s
  AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_get
SELECT value FROM {kv}
WHERE namespace = %(namespace)s AND key = %(key)s AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_delete
DELETE FROM {kv}
WHERE namespace = %(namespace)s AND key = %(key)s AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_list
SELECT key, value FROM {kv}
WHERE namespace = %(namespace)s AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_list_many
-- The live records of several namespaces (the checkpoints of jobs just leased).
SELECT namespace, key, value FROM {kv}
WHERE namespace = ANY(%(namespaces)s::text[]) AND (expires_at IS NULL OR expires_at > {now})

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

-- -- dependencies (options(after=...)): backends/deps.py says the rules ------------

-- name: parent_states
-- The parents named by jobs being enqueued, marked `waited_for` (migration 0011): a
-- parent that settles meanwhile waits for this transaction, then sees the mark in the
-- row it updates, and releases the new edges. One that settled first is seen here as
-- it ended.
UPDATE {jobs} SET waited_for = true WHERE id = ANY(%(ids)s::text[]) RETURNING id, state

-- name: link
-- The edges as arrays, one element each (rows_step).
INSERT INTO {deps} (parent, child, after_any)
SELECT * FROM unnest(%(parent)s::text[], %(child)s::text[], %(after_any)s::boolean[])

-- name: block
-- New jobs that wait for parents, as arrays: each its count of blockers (one per edge).
UPDATE {jobs} AS j SET state = 'blocked', blockers = j.blockers + b.blockers, updated_at = {now}
FROM unnest(%(id)s::text[], %(blockers)s::int[]) AS b(id, blockers)
WHERE j.id = b.id AND j.state = 'queued'

-- name: cancel_blocked
-- A child whose parent went dead or was cancelled (or a new job whose parent had).
UPDATE {jobs} SET state = 'cancelled', updated_at = {now}, error = %(error)s, finished_at = {now}
WHERE id = %(id)s AND state IN ('queued', 'blocked')

-- name: finished_parents
-- Which of these jobs others wait for, now that they have finished (a parent purged
-- counts as cancelled), with their states.
SELECT DISTINCT d.parent, p.state FROM {deps} AS d LEFT JOIN {jobs} AS p ON p.id = d.parent
WHERE d.parent = ANY(%(ids)s::text[]) AND (p.state IS NULL OR p.state IN ('succeeded', 'dead', 'cancelled'))

-- name: finished_parents_all
-- The sweep (recover_expired): any finished job others still wait for, e.g. one
-- whose lease expired, or one cancelled at its claim because it had expired.
SELECT DISTINCT d.parent, p.state FROM {deps} AS d LEFT JOIN {jobs} AS p ON p.id = d.parent
WHERE p.state IS NULL OR p.state IN ('succeeded', 'dead', 'cancelled')
LIMIT 1000

-- name: release
-- A whole release in one statement, so one implicit transaction: the edges of these
-- finished parents taken away (exactly once: a concurrent release of the same parent
-- finds them gone), then each child updated (`release_children`). Each parent comes
-- with what it does to a child with and without after_any and the error that names
-- it (deps.py decides: base.parent_verdicts). RETURNING: each child, its edges
-- taken, whether it was told to cancel.
WITH verdicts AS (
    SELECT * FROM unnest(%(parent)s::text[], %(cancels)s::boolean[], %(cancels_any)s::boolean[],
                         %(reason)s::text[]) AS v(parent, cancels, cancels_any, reason)
), taken AS (
    DELETE FROM {deps} AS d USING verdicts AS v WHERE d.parent = v.parent
    RETURNING d.child, CASE WHEN (CASE WHEN d.after_any THEN v.cancels_any ELSE v.cancels END)
                            THEN v.reason END AS error
), {release_children}

-- name: release_children
-- The end of a release: the edges `taken` (child, error or NULL) counted per child,
-- and each child's blockers lowered by its count in an UPDATE that also decides:
-- queued at zero, cancelled at once when a parent failed (a child no longer blocked
-- only counts). A child's row is locked from this UPDATE to the statement's commit,
-- never across a round trip; children are locked in id order (`locked`), so two
-- releases sharing children cannot deadlock. `= ANY(ARRAY(...))` makes each child
-- one probe of the id index (a seq scan would make a settle's cost grow with the
-- table).
children AS (
    SELECT child, count(*) AS taken, min(error) AS error FROM taken GROUP BY child
), locked AS (
    SELECT id FROM {jobs} WHERE id = ANY(ARRAY(SELECT child FROM children)) ORDER BY id FOR UPDATE
)
UPDATE {jobs} AS c SET
    state = CASE WHEN c.state <> 'blocked' THEN c.state WHEN t.error IS NOT NULL THEN 'cancelled'
                 WHEN c.blockers <= t.taken THEN 'queued' ELSE 'blocked' END,
    error = CASE WHEN c.state = 'blocked' AND t.error IS NOT NULL THEN t.error ELSE c.error END,
    finished_at = CASE WHEN c.state = 'blocked' AND t.error IS NOT NULL THEN {now} ELSE c.finished_at END,
    run_at = CASE WHEN c.state = 'blocked' AND t.error IS NULL AND c.blockers <= t.taken
                  THEN GREATEST(c.run_at, {now}) ELSE c.run_at END,
    updated_at = CASE WHEN c.state = 'blocked' AND (t.error IS NOT NULL OR c.blockers <= t.taken) THEN {now}
                      ELSE c.updated_at END,
    blockers = c.blockers - t.taken
FROM children AS t
WHERE c.id = ANY(ARRAY(SELECT id FROM locked)) AND t.child = c.id
RETURNING c.id, t.taken, t.error IS NOT NULL

-- name: settle_release
-- `settle` and the release of the settled jobs' edges in one statement (one round
-- trip, one commit): the verdicts come per (job, state it may end in), since a job
-- whose cancel was requested ends cancelled instead. Returns each settled job with
-- its state and whether it is waited for but no edge of it was seen (an enqueue
-- linked it while this statement waited for its row: a `release` follows), then each
-- child told to cancel (its own children hear of it in a `release`).
WITH settled AS (
    {settle_update}
    RETURNING j.id, j.state, j.waited_for
), verdicts AS (
    SELECT * FROM unnest(%(v_parent)s::text[], %(v_state)s::text[], %(v_cancels)s::boolean[],
                         %(v_cancels_any)s::boolean[], %(v_reason)s::text[])
        AS v(parent, state, cancels, cancels_any, reason)
), taken AS (
    DELETE FROM {deps} AS d USING settled AS s, verdicts AS v
    WHERE d.parent = s.id AND v.parent = s.id AND v.state = s.state
    RETURNING d.parent, d.child, CASE WHEN (CASE WHEN d.after_any THEN v.cancels_any ELSE v.cancels END)
                                      THEN v.reason END AS error
), released AS (
    WITH {release_children}
)
SELECT s.id, s.state, s.waited_for AND NOT EXISTS (SELECT 1 FROM taken WHERE taken.parent = s.id), false
FROM settled AS s
UNION ALL
SELECT id, 'blocked', false, true FROM released AS r(id, taken, cancels) WHERE cancels

-- name: count_states
-- A batch's members by state (batch.py): one query for all of them.
SELECT state, count(*) FROM {jobs} WHERE id = ANY(%(ids)s::text[]) GROUP BY state

-- name: dependents
-- The jobs still waiting for this one (`deferq job`, GET /v1/jobs/{id}).
SELECT child FROM {deps} WHERE parent = %(id)s ORDER BY child LIMIT 100

-- name: history_add
-- The per-minute history (deferq/observe/history.py): add to counters, a batch as arrays in
-- one statement. The rows of a batch are distinct (the writer sums them first), as
-- ON CONFLICT DO UPDATE needs.
INSERT INTO {history} AS h (minute, queue, task, field, amount)
SELECT * FROM unnest(%(minutes)s::bigint[], %(queues)s::text[], %(tasks)s::text[],
                     %(fields)s::text[], %(amounts)s::bigint[])
ON CONFLICT (minute, queue, task, field) DO UPDATE SET amount = h.amount + EXCLUDED.amount

-- name: history_read
SELECT minute, field, SUM(amount) FROM {history}
WHERE minute >= %(first)s AND minute < %(end)s
  AND (%(queue)s::text IS NULL OR queue = %(queue)s) AND (%(task)s::text IS NULL OR task = %(task)s)
GROUP BY minute, field

-- name: history_prune
DELETE FROM {history} WHERE minute < %(before)s

-- name: history_forget
-- One queue's counters of a span of minutes (`deferq bench` removes its own).
DELETE FROM {history} WHERE queue = %(queue)s AND minute >= %(first)s AND minute < %(end)s

-- name: find_jobs
-- Listing and searching (backends/search.py, sql/search.py): this, then the find_*
-- conditions that apply joined by AND, then find_order. seq last: the keyset cursor.
SELECT {job_columns}, {now}, seq FROM {jobs} WHERE

-- name: find_state
state = %(state)s

-- name: find_scheduled
run_at > {now}

-- name: find_due
run_at <= {now}

-- name: find_queue
queue = %(queue)s

-- name: find_task
task = %(task)s

-- name: find_tag
-- the tag given quoted, as the JSON array holds it (search.tag_text)
strpos(tags, %(tag)s) > 0

-- name: find_chunk
-- the jobs a chunk call last ran, through deferq_jobs_chunk_call
chunk_call = %(chunk)s

-- name: find_after
seq < %(after)s

-- name: find_order
ORDER BY seq DESC LIMIT %(limit)s

-- name: find_text
-- The pg_trgm index (migrations 0009, 0017): the same expression, ILIKE '%text%'.
-- deferq_search_text leaves encrypted arguments and errors out (they find nothing).
{schema_prefix}deferq_search_text(payload, error, unique_key) ILIKE %(pattern)s

-- name: find_words
-- Without pg_trgm: the full-text index of whole words (migrations 0009, 0017).
to_tsvector('simple', {schema_prefix}deferq_search_text(payload, error, unique_key))
    @@ plainto_tsquery('simple', %(text)s)

-- name: text_index
-- Which text index migration 0009 made.
SELECT to_regclass('{schema_prefix}deferq_jobs_text_trgm') IS NOT NULL

-- name: hold_prune
-- A limit's notes of held jobs whose time has come (their jobs are due: nothing to give back).
DELETE FROM {holds} WHERE name = %(name)s AND due <= {now}

-- name: hold
-- A leased job snoozes until due for the limit name (limits/__init__.py, limit_hold).
INSERT INTO {holds} (name, job_id, due) VALUES (%(name)s, %(job_id)s, %(due)s)
ON CONFLICT (name, job_id) DO UPDATE SET due = EXCLUDED.due

-- name: holds_taken
-- A batch of a limit's notes (limit_release), the soonest due first, locked: another
-- release waits for this one and then finds them gone.
SELECT job_id, due FROM {holds} WHERE name = %(name)s ORDER BY due LIMIT %(batch)s FOR UPDATE

-- name: hold_release
-- The noted job is due now if it still waits for the time noted (within the slack).
UPDATE {jobs} SET run_at = {now}, updated_at = {now}
WHERE id = %(job_id)s AND state = 'queued' AND run_at > {now} AND abs(run_at - %(due)s) <= %(slack)s

-- name: hold_drop
DELETE FROM {holds} WHERE name = %(name)s AND job_id = %(job_id)s
