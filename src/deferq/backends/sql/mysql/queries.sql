-- deferq's queries on MySQL / MariaDB. Parameters are %(name)s (PyMySQL); a tuple
-- parameter renders as a list for IN. {jobs}, {kv}, {migrations} are the tables
-- (qualified by the URL's database), {now} the clock. Differences from
-- postgres/queries.sql are noted where they occur. Our connections run READ
-- COMMITTED, so locking reads lock rows, not the gaps between them.

-- name: now
-- The clock as epoch seconds, whatever the session's time zone (UTC_TIMESTAMP does
-- not depend on it; UNIX_TIMESTAMP(NOW()) would, around daylight-saving changes).
-- Constant within one statement, like PostgreSQL's now().
(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) / 1e6)

-- name: job_columns
id, task, payload, queue, priority, state, attempts, max_attempts, timeout,
unique_key, run_at, created_at, lease_until, worker, error, result, finished_at,
progress, progress_message, cancel_requested_at, expires_at, updated_at, remark, last_worker, tags, fair_key, waits_for,
chunk_call

-- name: clock
SELECT {now}

-- name: enqueue
-- One row's VALUES; PyMySQL's executemany sends the whole batch as one multi-row
-- INSERT (its VALUES may hold only placeholders, so the due time is computed from a
-- clock read just before). A held unique key is a duplicate on deferq_jobs_live_key:
-- the no-op update skips the row. There is no RETURNING: stored_ids tells.
INSERT INTO {jobs} (id, task, payload, queue, priority, state, max_attempts, timeout,
                    unique_key, run_at, created_at, expires_at, remark, tags, fair_key, vtime, updated_at)
VALUES (%(id)s, %(task)s, %(payload)s, %(queue)s, %(priority)s, %(state)s, %(max_attempts)s,
        %(timeout)s, %(key)s, %(run_at)s, %(created_at)s, %(expires_at)s, %(remark)s, %(tags)s,
        %(fair_key)s, %(vtime)s, %(created_at)s)
ON DUPLICATE KEY UPDATE seq = seq

-- name: stored_ids
SELECT id FROM {jobs} WHERE id IN %(ids)s

-- name: holders
-- The unfinished jobs with these keys: each key's holder, and a job waiting behind a
-- running holder (on_conflict replace / debounce), told apart by the raw priority
-- (the last column: raised by 20 for the one waiting behind, see base.BEHIND).
SELECT {job_columns}, {now}, priority FROM {jobs}
WHERE unique_key IN %(keys)s AND state IN ('queued', 'active')

-- name: replace
-- on_conflict replace / debounce: a waiting job takes the new arguments and due time.
-- Guarded: a job claimed meanwhile is left alone (the backend looks again).
-- A job at its fair level goes back to its plain one, due-time order (fair.py).
UPDATE {jobs} SET payload = %(payload)s, run_at = %(run_at)s, updated_at = {now},
                  priority = CASE WHEN mod(priority, 20) >= 10 THEN priority - 10 ELSE priority END, vtime = NULL
WHERE id = %(id)s AND state = 'queued'

-- name: step_up
-- Jobs waiting behind the holder of their key take its place once it is gone: their
-- priority comes back down to a level claims read. While the key has a holder (one
-- retrying, say) they keep waiting. MySQL refuses a subquery on the table it updates,
-- so the holder is looked for with a join (live_key and behind_key: the migrations).
UPDATE {jobs} AS s LEFT JOIN {jobs} AS h ON h.live_key = s.behind_key
SET s.priority = s.priority - 20
WHERE s.behind_key IN %(keys)s AND h.seq IS NULL

-- name: step_up_all
-- The same for every key (the sweep, base.py): one range of deferq_jobs_behind.
UPDATE {jobs} AS s LEFT JOIN {jobs} AS h ON h.live_key = s.behind_key
SET s.priority = s.priority - 20
WHERE s.behind_key IS NOT NULL AND h.seq IS NULL

-- name: claim
-- Due jobs of one queue and priority, oldest first, locked for the claim. SKIP LOCKED
-- needs MySQL 8 / MariaDB 10.6. One range of deferq_jobs_waiting in index order; the
-- backend asks priority by priority in the caller's preference order (PostgreSQL does
-- that inside one statement with a lateral join, which MariaDB lacks) and then
-- leases the rows with `lease` below, in the same transaction. A paused queue gives
-- nothing ({unpaused} names the queue, not the row: one look-up per statement).
-- With it, in the same statement, the priority's fair level (+ 10, fair.py) in
-- (virtual time, seq) order through deferq_jobs_fair: one statement per priority, as
-- before fair queues. The last columns: the stored level and the order it was read in.
-- No `vtime IS NOT NULL` there: every job waiting at a fair level has one (leave_fair
-- clears both at once), and with equalities alone the read is a `ref` of (queue,
-- level), which stops at the level's end; a range read of an empty level walks on
-- through the next level's entries of jobs leased a moment ago that InnoDB has not
-- purged yet (measured: hundreds of pages a claim while a backlog drains).
(SELECT {job_columns}, {now}, seq, priority, run_at FROM {jobs}
 WHERE state = 'queued' AND queue = %(queue)s AND priority = %(priority)s AND run_at <= {now}
   AND {unpaused}
 ORDER BY run_at, seq
 LIMIT %(limit)s
 FOR UPDATE SKIP LOCKED)
UNION ALL
(SELECT {job_columns}, {now}, seq, priority, vtime FROM {jobs} FORCE INDEX (deferq_jobs_fair)
 WHERE state = 'queued' AND queue = %(queue)s AND priority = %(priority)s + 10
   AND run_at <= {now} AND {unpaused}
 ORDER BY vtime, seq
 LIMIT %(limit)s
 FOR UPDATE SKIP LOCKED)

-- name: unpaused
NOT EXISTS (SELECT 1 FROM {paused} WHERE queue = %(queue)s)

-- name: lease
-- A job leased from its fair level leaves it ({leave_fair}).
UPDATE {jobs} SET state = 'active', attempts = attempts + 1, worker = %(worker)s,
                  lease_until = %(lease_until)s, last_worker = %(worker)s, updated_at = %(now)s, {leave_fair}
WHERE seq IN %(seqs)s

-- name: leave_fair
-- A fair job that stops waiting leaves its fair level and deferq_jobs_fair, which has no
-- `state` (MySQL has no partial index: a state in it would be rewritten at every lease
-- and settle of every job): a fair claim then never passes over rows that stopped
-- waiting. A job without a key is left as it is (no index is written).
priority = CASE WHEN priority >= 10 AND priority < 20 THEN priority - 10 ELSE priority END, vtime = NULL

-- name: expire
-- Chosen rows whose expiry has passed: cancelled instead of leased (never run).
UPDATE {jobs} SET state = 'cancelled', updated_at = {now}, error = 'expired', finished_at = %(now)s, updated_at = %(now)s,
                  {leave_fair}
WHERE seq IN %(seqs)s

-- name: claim_update_set
-- What an update-first claim sets: the lease and this claim's token, except on rows
-- whose expiry has passed, which are cancelled instead. `state` is assigned first: the
-- CASEs after it read only expires_at.
    state = CASE WHEN expires_at <= {now} THEN 'cancelled' ELSE 'active' END,
    attempts = CASE WHEN expires_at <= {now} THEN attempts ELSE attempts + 1 END,
    worker = CASE WHEN expires_at <= {now} THEN NULL ELSE %(worker)s END,
    lease_until = CASE WHEN expires_at <= {now} THEN NULL ELSE {now} + %(lease)s END,
    error = CASE WHEN expires_at <= {now} THEN 'expired' ELSE error END,
    finished_at = CASE WHEN expires_at <= {now} THEN {now} END,
    last_worker = CASE WHEN expires_at <= {now} THEN last_worker ELSE %(worker)s END,
    updated_at = {now},
    claim_token = %(token)s

-- name: claim_update
-- Without SKIP LOCKED (older servers, or ?claim=update): the seed's "update first,
-- then select what I own" (S3-1). One statement marks up to %(limit)s rows with this
-- claim's token; a competing worker waits only for that statement, never for a
-- SELECT ... FOR UPDATE held across round trips. `claimed` then reads them back.
-- Over several queues the rows of one level are sorted (no index order across them).
-- The hint: left to itself, MariaDB may read every waiting row by (state, finished_at)
-- and sort them, locking them all, so concurrent claims deadlock; through the waiting
-- index it reads (and locks) the rows it takes.
-- Rows whose expiry has passed are cancelled instead ("expired", the attempt not
-- counted), and `claimed` reads them back too, for the history ({claim_update_set}).
UPDATE {jobs} FORCE INDEX (deferq_jobs_waiting) SET {claim_update_set}
WHERE state = 'queued' AND queue IN %(queues)s AND priority = %(priority)s AND run_at <= {now}
  AND queue NOT IN (SELECT queue FROM {paused})
ORDER BY run_at, seq
LIMIT %(limit)s

-- name: claim_update_fair
-- The same for a fair level (a priority + 10, fair.py), in (virtual time, seq) order.
UPDATE {jobs} FORCE INDEX (deferq_jobs_fair) SET {claim_update_set}
WHERE state = 'queued' AND queue IN %(queues)s AND priority = %(priority)s
  AND run_at <= {now}
  AND queue NOT IN (SELECT queue FROM {paused})
ORDER BY vtime, seq
LIMIT %(limit)s

-- name: claimed_leave_fair
-- The fair jobs an update-first claim took leave their level (leave_fair), once
-- `claimed` has read their virtual times (the claim's order).
UPDATE {jobs} SET {leave_fair} WHERE claim_token = %(token)s AND vtime IS NOT NULL

-- name: claimed
-- What the claim leased, and what it cancelled because it had expired (reserve counts those).
SELECT {job_columns}, {now}, seq, priority, coalesce(vtime, run_at) FROM {jobs}
WHERE state IN ('active', 'cancelled') AND claim_token = %(token)s

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
-- A key's next virtual time, never moved back.
INSERT INTO {fair} (queue, priority, fair_key, next_vtime) VALUES (%(queue)s, %(level)s, %(key)s, %(next)s)
ON DUPLICATE KEY UPDATE next_vtime = GREATEST(next_vtime, VALUES(next_vtime))

-- name: heartbeat
-- One job (MySQL has no arrays to unnest; the batch is one transaction). Our
-- connections count matched rows (CLIENT.FOUND_ROWS), so 1 means the fence held.
-- The optimizer, seeing few active rows, would rather range-scan them by state than
-- look the id up: the hint keeps every fenced update a single-row look-up.
UPDATE {jobs} FORCE INDEX (deferq_jobs_id) SET lease_until = {now} + %(lease)s
WHERE id = %(id)s AND state = 'active' AND worker = %(worker)s AND attempts = %(attempts)s

-- name: cancels_requested
-- Which of the leases a heartbeat just renewed someone asked to stop (no RETURNING).
SELECT id FROM {jobs} WHERE id IN %(ids)s AND state = 'active' AND cancel_requested_at IS NOT NULL

-- name: progress
-- What a running task last reported, fenced like heartbeat (one per job).
UPDATE {jobs} FORCE INDEX (deferq_jobs_id) SET progress = %(progress)s, progress_message = %(message)s
WHERE id = %(id)s AND state = 'active' AND worker = %(worker)s AND attempts = %(attempts)s

-- name: settle
-- One outcome, fenced like heartbeat. MySQL assigns left to right and later
-- assignments see earlier ones, so the columns read (attempts) come before the
-- columns cleared (worker, lease_until). Same index hint as heartbeat. A job whose
-- cancel was requested ends cancelled unless it succeeded (base.py).
UPDATE {jobs} FORCE INDEX (deferq_jobs_id) SET
    state = CASE WHEN cancel_requested_at IS NOT NULL AND %(state)s <> 'succeeded' THEN 'cancelled'
                 ELSE %(state)s END,
    attempts = attempts - %(released)s,
    run_at = CASE WHEN %(kind)s IN ('retry', 'snooze') THEN coalesce(%(due)s, {now} + %(delay)s) ELSE run_at END,
    -- due later: a job at its fair level waits at its plain one (fair.py)
    priority = CASE WHEN %(kind)s IN ('retry', 'snooze') AND priority >= 10 THEN priority - 10 ELSE priority END,
    vtime = CASE WHEN %(kind)s IN ('retry', 'snooze') THEN NULL ELSE vtime END,
    error = CASE WHEN %(kind)s IN ('retry', 'dead', 'cancelled') THEN %(error)s ELSE error END,
    result = CASE WHEN %(kind)s = 'succeeded' THEN %(result)s ELSE result END,
    finished_at = CASE WHEN %(state)s <> 'queued' OR cancel_requested_at IS NOT NULL THEN {now} END,
    waits_for = %(waits_for)s,
    chunk_call = coalesce(%(chunk_call)s, chunk_call),
    worker = NULL,
    lease_until = NULL,
    updated_at = {now}
WHERE id = %(id)s AND state = 'active' AND worker = %(worker)s AND attempts = %(attempts)s

-- name: expired_leases
-- The leases recover_expired takes back, locked until it has (no RETURNING on an UPDATE
-- here): what each will become, for the history.
SELECT seq, queue, task, CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
                              WHEN attempts >= max_attempts THEN 'dead' ELSE 'queued' END
FROM {jobs} WHERE state = 'active' AND lease_until < {now} FOR UPDATE

-- name: recover_expired
-- Back to waiting; dead when its attempts are used up; cancelled when that was asked.
-- `error` reads `worker` before it is cleared (left-to-right assignment). The rows
-- expired_leases locked, in the same transaction.
UPDATE {jobs} SET
    finished_at = CASE WHEN cancel_requested_at IS NOT NULL OR attempts >= max_attempts THEN {now} END,
    state = CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
                 WHEN attempts >= max_attempts THEN 'dead' ELSE 'queued' END,
    error = CONCAT('lease expired (worker ', worker, ' stopped heartbeating)'),
    worker = NULL,
    lease_until = NULL,
    updated_at = {now}
WHERE seq IN %(seqs)s AND state = 'active' AND lease_until < {now}

-- name: next_due
-- The earliest due time of one queue: one index probe per priority (MIN over the
-- prefix of deferq_jobs_waiting); none while it is paused. The backend sends one per
-- queue, in one packet.
SELECT (SELECT MIN(run_at) FROM {jobs} WHERE state = 'queued' AND queue = %(queue)s AND priority = 0
                                      AND {unpaused}),
       (SELECT MIN(run_at) FROM {jobs} WHERE state = 'queued' AND queue = %(queue)s AND priority = 1
                                      AND {unpaused}),
       (SELECT MIN(run_at) FROM {jobs} WHERE state = 'queued' AND queue = %(queue)s AND priority = 2
                                      AND {unpaused}),
       -- the fair levels (fair.py): every job there is due
       (SELECT {now} FROM {jobs} WHERE state = 'queued' AND queue = %(queue)s AND priority IN (10, 11, 12)
                                  AND vtime IS NOT NULL AND {unpaused} LIMIT 1),
       {now}

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
-- its next heartbeat, and its outcome is stored as cancelled. `state` is assigned
-- last: the assignments before it read the old state (left-to-right assignment).
UPDATE {jobs} SET
    finished_at = CASE WHEN state IN ('queued', 'blocked') THEN {now} ELSE finished_at END,
    cancel_requested_at = CASE WHEN state = 'active' THEN coalesce(cancel_requested_at, {now}) END,
    updated_at = {now},
    vtime = CASE WHEN state = 'queued' THEN NULL ELSE vtime END,
    state = CASE WHEN state IN ('queued', 'blocked') THEN 'cancelled' ELSE state END
WHERE id = %(id)s AND state IN ('queued', 'active', 'blocked')

-- name: wake
-- A job waiting for its due time is due now (a durable step's event came).
UPDATE {jobs} SET run_at = {now}, updated_at = {now}
WHERE id = %(id)s AND state = 'queued' AND run_at > {now}

-- name: retry_dead
-- Unlike PostgreSQL, the job keeps its seq: moving an AUTO_INCREMENT key by hand can
-- leave the counter behind it on MariaDB. Its new due time (now) already puts it
-- after every job due earlier; seq only breaks exact ties. Fails on
-- deferq_jobs_live_key when a newer job holds its key (the caller answers False).
UPDATE {jobs} SET state = 'queued', attempts = 0, run_at = {now}, finished_at = NULL, updated_at = {now}
WHERE id = %(id)s AND state = 'dead'

-- name: rerun
-- A finished job (succeeded, dead or cancelled) queued again, due now, its attempts reset,
-- its result and cancel request cleared (a durable job retried from one of its steps). Fails
-- on deferq_jobs_live_key when a newer job holds its key (the caller answers False).
UPDATE {jobs} SET state = 'queued', attempts = 0, run_at = {now}, finished_at = NULL, updated_at = {now},
                  result = NULL, cancel_requested_at = NULL, waits_for = NULL
WHERE id = %(id)s AND state IN ('succeeded', 'dead', 'cancelled')

-- name: run_now
-- A scheduled job (queued, due later) becomes due now; its attempts are kept.
UPDATE {jobs} SET run_at = {now}, updated_at = {now}
WHERE id = %(id)s AND state = 'queued' AND run_at > {now}

-- name: list_scheduled
SELECT {job_columns}, {now} FROM {jobs}
WHERE state = 'queued' AND run_at > {now} AND (%(queue)s IS NULL OR queue = %(queue)s)
ORDER BY run_at DESC, seq DESC LIMIT %(limit)s

-- name: list_queued
SELECT {job_columns}, {now} FROM {jobs}
WHERE state = 'queued' AND run_at <= {now} AND (%(queue)s IS NULL OR queue = %(queue)s)
ORDER BY run_at DESC, seq DESC LIMIT %(limit)s

-- name: list_active
SELECT {job_columns}, {now} FROM {jobs}
WHERE state = 'active' AND (%(queue)s IS NULL OR queue = %(queue)s)
ORDER BY run_at DESC, seq DESC LIMIT %(limit)s

-- name: list_finished
SELECT {job_columns}, {now} FROM {jobs}
WHERE state = %(state)s AND (%(queue)s IS NULL OR queue = %(queue)s)
ORDER BY finished_at DESC, seq DESC LIMIT %(limit)s

-- name: purgeable
-- Whether `purge` has anything to delete: a plain read takes no lock, while the DELETE
-- locks what its scan meets, next to the rows that settles are finishing.
SELECT 1 FROM {jobs} WHERE state IN %(states)s AND finished_at <= {now} - %(older_than)s LIMIT 1

-- name: purge
-- In slices of %(batch)s rows, each its own short transaction.
DELETE FROM {jobs} WHERE state IN %(states)s AND finished_at <= {now} - %(older_than)s
LIMIT %(batch)s

-- name: stats
SELECT queue,
       CASE WHEN state = 'queued' AND run_at > {now} THEN 'scheduled' ELSE state END AS shown,
       COUNT(*),
       MAX(CASE WHEN state = 'queued' AND run_at <= {now} THEN {now} - run_at END)
FROM {jobs} GROUP BY queue, shown

-- name: delete
DELETE FROM {jobs} WHERE id = %(id)s AND state IN ('succeeded', 'dead', 'cancelled')

-- name: set_remark
UPDATE {jobs} FORCE INDEX (deferq_jobs_id) SET remark = %(remark)s, updated_at = {now} WHERE id = %(id)s

-- name: reseal
-- deferq encryption rotate: an encrypted value replaced where the job still holds it whole:
-- a JSON string in the payload or result (%(old_json)s, with its quotes), or the whole error
-- or progress message. REPLACE matches case-sensitively; LOCATE and = are made to by BINARY.
UPDATE {jobs} FORCE INDEX (deferq_jobs_id) SET payload = REPLACE(payload, %(old_json)s, %(new_json)s),
    result = REPLACE(result, %(old_json)s, %(new_json)s),
    error = CASE WHEN error = BINARY %(old)s THEN %(new)s ELSE error END,
    progress_message = CASE WHEN progress_message = BINARY %(old)s THEN %(new)s ELSE progress_message END
WHERE id = %(id)s AND (LOCATE(BINARY %(old_json)s, payload) > 0 OR LOCATE(BINARY %(old_json)s, result) > 0
    OR error = BINARY %(old)s OR progress_message = BINARY %(old)s)

-- name: pause
INSERT IGNORE INTO {paused} (queue, paused_at) VALUES (%(queue)s, {now})

-- name: resume
-- Idle workers poll the next due time: they see it at their next look.
DELETE FROM {paused} WHERE queue = %(queue)s

-- name: paused
SELECT queue, paused_at FROM {paused}

-- name: kv_put
-- `key` is a reserved word in MySQL. VALUES() works on MySQL and MariaDB alike.
INSERT INTO {kv} (namespace, `key`, value, expires_at)
VALUES (%(namespace)s, %(key)s, %(value)s, {now} + %(ttl)s)
ON DUPLICATE KEY UPDATE value = VALUES(value), expires_at = VALUES(expires_at)

-- name: kv_expire
-- Every live record of a namespace expires ttl seconds from now (a job's checkpoints
-- once it has ended: steps/checkpoints.py).
UPDATE {kv} SET expires_at = {now} + %(ttl)s
WHERE namespace = %(namespace)s AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_expire_many
-- The same for several namespaces (the checkpoints of a settled batch's jobs).
UPDATE {kv} SET expires_at = {now} + %(ttl)s
WHERE namespace IN %(namespaces)s AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_delete_expired
DELETE FROM {kv} WHERE namespace = %(namespace)s AND `key` = %(key)s AND expires_at <= {now}

-- name: kv_insert_new
-- IGNORE: the row count says whether it went in (0: a live record holds the key).
INSERT IGNORE INTO {kv} (namespace, `key`, value, expires_at)
VALUES (%(namespace)s, %(key)s, %(value)s, {now} + %(ttl)s)

-- name: kv_lock
-- A kv record locked until the transaction ends (rate_take, slot_take): read, then written.
SELECT value, {now} FROM {kv} WHERE namespace = %(namespace)s AND `key` = %(key)s FOR UPDATE

-- name: kv_swap
-- Compare-and-set: the row count says whether the live record held the expected value.
UPDATE {kv} SET value = %(value)s, expires_at = {now} + %(ttl)s
WHERE namespace = %(namespace)s AND `key` = %(key)s AND value = %(expected)s
  AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_get
SELECT value FROM {kv}
WHERE namespace = %(namespace)s AND `key` = %(key)s AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_delete
DELETE FROM {kv}
WHERE namespace = %(namespace)s AND `key` = %(key)s AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_list
SELECT `key`, value FROM {kv}
WHERE namespace = %(namespace)s AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_list_many
-- The live records of several namespaces (the checkpoints of jobs just leased).
SELECT namespace, `key`, value FROM {kv}
WHERE namespace IN %(namespaces)s AND (expires_at IS NULL OR expires_at > {now})

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS {migrations} (
    version    INT NOT NULL PRIMARY KEY,
    name       VARCHAR(255) NOT NULL,
    applied_at DOUBLE NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin

-- name: applied_migrations
SELECT version FROM {migrations} ORDER BY version

-- name: record_migration
INSERT INTO {migrations} (version, name, applied_at) VALUES (%(version)s, %(name)s, {now})

-- -- dependencies (options(after=...)): backends/deps.py says the rules ------------

-- name: parent_states
-- The parents named by jobs being enqueued, locked (FOR UPDATE): a parent that settles
-- meanwhile waits for this transaction, then finds the edges it adds.
SELECT id, state FROM {jobs} WHERE id IN %(ids)s FOR UPDATE

-- name: link
INSERT INTO {deps} (parent, child, after_any) VALUES (%(parent)s, %(child)s, %(after_any)s)

-- name: block
-- A new job that waits for %(blockers)s parents (one edge each).
UPDATE {jobs} SET state = 'blocked', blockers = blockers + %(blockers)s, updated_at = {now}
WHERE id = %(id)s AND state = 'queued'

-- name: cancel_blocked
-- A child whose parent went dead or was cancelled (or a new job whose parent had).
UPDATE {jobs} SET state = 'cancelled', updated_at = {now}, error = %(error)s, finished_at = {now}
WHERE id = %(id)s AND state IN ('queued', 'blocked')

-- name: finished_parents
-- Which of these jobs others wait for, now that they have finished (a parent purged
-- counts as cancelled), with their states.
SELECT DISTINCT d.parent, p.state FROM {deps} AS d LEFT JOIN {jobs} AS p ON p.id = d.parent
WHERE d.parent IN %(ids)s AND (p.state IS NULL OR p.state IN ('succeeded', 'dead', 'cancelled'))

-- name: finished_parents_all
-- The sweep (recover_expired): any finished job others still wait for, e.g. one
-- whose lease expired, or one cancelled at its claim because it had expired.
SELECT DISTINCT d.parent, p.state FROM {deps} AS d LEFT JOIN {jobs} AS p ON p.id = d.parent
WHERE p.state IS NULL OR p.state IN ('succeeded', 'dead', 'cancelled')
LIMIT 1000

-- name: take_edges
-- The edges of the finished parents among %(ids)s, taken away (exactly once: only
-- the transaction that deletes an edge acts on it), with each parent's state. Two
-- statements, sent with the BEGIN in one packet: the edges read under their locks
-- (MySQL has no DELETE ... RETURNING; MariaDB's would spare nothing), then deleted.
-- Only the parents' own rows are locked here, never a child's.
SELECT d.parent, d.child, d.after_any, p.state FROM {deps} AS d LEFT JOIN {jobs} AS p ON p.id = d.parent
WHERE d.parent IN %(ids)s AND (p.state IS NULL OR p.state IN ('succeeded', 'dead', 'cancelled'))
FOR UPDATE;
DELETE d FROM {deps} AS d LEFT JOIN {jobs} AS p ON p.id = d.parent
WHERE d.parent IN %(ids)s AND (p.state IS NULL OR p.state IN ('succeeded', 'dead', 'cancelled'))

-- name: release_child
-- A child %(taken)s edges fewer: queued when none are left, cancelled with %(error)s
-- (a parent failed), else still blocked; a child no longer blocked (cancelled by
-- another parent, or by hand) only counts. No RETURNING needed: the UPDATE decides
-- by itself, and the children of one release go in one packet with the COMMIT, so
-- a child's row lock lasts no round trip. MySQL assigns left to right (later
-- assignments see earlier ones): each column is read only before it is assigned.
UPDATE {jobs} FORCE INDEX (deferq_jobs_id) SET
    error = CASE WHEN state = 'blocked' AND %(error)s IS NOT NULL THEN %(error)s ELSE error END,
    finished_at = CASE WHEN state = 'blocked' AND %(error)s IS NOT NULL THEN {now} ELSE finished_at END,
    run_at = CASE WHEN state = 'blocked' AND %(error)s IS NULL AND blockers <= %(taken)s
                  THEN GREATEST(run_at, {now}) ELSE run_at END,
    updated_at = CASE WHEN state = 'blocked' AND (%(error)s IS NOT NULL OR blockers <= %(taken)s) THEN {now}
                      ELSE updated_at END,
    state = CASE WHEN state <> 'blocked' THEN state WHEN %(error)s IS NOT NULL THEN 'cancelled'
                 WHEN blockers <= %(taken)s THEN 'queued' ELSE 'blocked' END,
    blockers = blockers - %(taken)s
WHERE id = %(child)s

-- name: count_states
-- A batch's members by state (batch.py): one query for all of them.
SELECT state, count(*) FROM {jobs} WHERE id IN %(ids)s GROUP BY state

-- name: dependents
-- The jobs still waiting for this one (`deferq job`, GET /v1/jobs/{id}).
SELECT child FROM {deps} WHERE parent = %(id)s ORDER BY child LIMIT 100

-- name: history_add
-- The per-minute history (deferq/observe/history.py): add to counters; a batch is one
-- multi-row INSERT (PyMySQL's executemany). VALUES() works on MySQL and MariaDB alike.
INSERT INTO {history} (minute, queue, task, field, amount)
VALUES (%(minute)s, %(queue)s, %(task)s, %(field)s, %(amount)s)
ON DUPLICATE KEY UPDATE amount = amount + VALUES(amount)

-- name: history_read
SELECT minute, field, SUM(amount) FROM {history}
WHERE minute >= %(first)s AND minute < %(end)s
  AND (%(queue)s IS NULL OR queue = %(queue)s) AND (%(task)s IS NULL OR task = %(task)s)
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
-- the tag given quoted, as the JSON array holds it (search.tag_text); the column is
-- utf8mb4_bin, so the match is exact
LOCATE(%(tag)s, tags) > 0

-- name: find_chunk
-- the jobs a chunk call last ran, through deferq_jobs_chunk_call
chunk_call = %(chunk)s

-- name: find_after
seq < %(after)s

-- name: find_order
ORDER BY seq DESC LIMIT %(limit)s

-- name: find_text
-- No text index: the newest :window jobs (by seq) are looked at, without case. Encrypted
-- arguments and errors are left out (backends/search.py ENCRYPTED_RAW).
seq > %(floor)s AND ((LOWER(payload) LIKE %(pattern)s AND LEFT(payload, 18) <> '[[],{"$enc":"$enc:')
                     OR (LOWER(error) LIKE %(pattern)s AND LEFT(error, 5) <> '$enc:')
                     OR LOWER(unique_key) LIKE %(pattern)s)

-- name: seq_range
SELECT MIN(seq), MAX(seq) FROM {jobs}

-- name: hold_prune
-- A limit's notes of held jobs whose time has come (their jobs are due: nothing to give back).
DELETE FROM {holds} WHERE name = %(name)s AND due <= {now}

-- name: hold
-- A leased job snoozes until due for the limit name (limits/__init__.py, limit_hold).
INSERT INTO {holds} (name, job_id, due) VALUES (%(name)s, %(job_id)s, %(due)s)
ON DUPLICATE KEY UPDATE due = VALUES(due)

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
