-- deferq's queries on SQLite. Parameters are :name (sqlite3), except in the hot-path
-- statements (enqueue, claim, succeed), which bind tuples: `?` in the order noted
-- there. {jobs}, {kv}, {migrations} are the tables; {now} is :now, the clock, which
-- the backend binds once per statement from this machine's time.time() (SQLite is
-- embedded: every process that opens the file shares that clock, and SQLite's own
-- has milliseconds only). sqlite3 binds no arrays: a list arrives as a JSON array,
-- read with json_each. Differences from postgres/queries.sql are noted where they
-- occur. The unique key column is `key` here (`unique_key` there).
--
-- There is no FOR UPDATE SKIP LOCKED: SQLite has one writer at a time, and every
-- transaction that writes starts with BEGIN IMMEDIATE (sqlite.py says why).

-- name: job_columns
-- Every job read returns these, in this order (rows.py decodes them).
id, task, payload, queue, priority, state, attempts, max_attempts, timeout,
key, run_at, created_at, lease_until, worker, error, result, finished_at,
progress, progress_message, cancel_requested_at, expires_at, updated_at, remark, last_worker, tags, fair_key, waits_for,
chunk_call

-- name: data_version
-- Changes whenever another connection commits: a read of shared memory, no I/O.
-- Idle workers poll it instead of waiting for a notification (PostgreSQL's LISTEN).
PRAGMA data_version

-- name: enqueue
-- One job with what a new job has; the other columns start NULL or at their default.
-- The backend computes the due time, so a batch runs as one prepared statement. A job
-- whose key an unfinished job holds conflicts on deferq_jobs_live_key and is skipped.
-- Positional parameters, in the order of the column list (job.NEW_COLUMNS, rows.new_row),
-- then the virtual time of a job at its fair level (fair.py; else NULL): the commonest
-- write binds a tuple, cheaper than looking up names.
INSERT OR IGNORE INTO {jobs} (id, task, payload, queue, priority, state, max_attempts, timeout,
                              key, run_at, created_at, expires_at, updated_at, remark, tags, fair_key, vtime)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)

-- name: holders
-- The unfinished jobs with these keys: each key's holder, and a job waiting behind a
-- running holder (on_conflict replace / debounce), told apart by the raw priority
-- (the last column: raised by 20 for the one waiting behind, see base.BEHIND).
SELECT {job_columns}, {now}, priority FROM {jobs}
WHERE key IN (SELECT value FROM json_each(:keys)) AND state IN ('queued', 'active')

-- name: replace
-- on_conflict replace / debounce: a waiting job takes the new arguments and due time.
-- Guarded: a job claimed meanwhile is left alone (the backend looks again).
-- A job at its fair level goes back to its plain one, due-time order (fair.py).
UPDATE {jobs} SET payload = :payload, run_at = :run_at, updated_at = {now},
                  priority = CASE WHEN priority % 20 >= 10 THEN priority - 10 ELSE priority END, vtime = NULL
WHERE id = :id AND state = 'queued'

-- name: step_up
-- Jobs waiting behind the holder of their key take its place once it is gone: their
-- priority comes back down to a level claims read. While the key has a holder (one
-- retrying, say) they keep waiting.
UPDATE {jobs} SET priority = priority - 20
WHERE key IN (SELECT value FROM json_each(:keys)) AND state = 'queued' AND priority >= 20
  AND NOT EXISTS (SELECT 1 FROM {jobs} AS h WHERE h.key = {jobs}.key
                  AND h.state IN ('queued', 'active') AND h.priority < 20)

-- name: step_up_all
-- The same for every key (the sweep, base.py): one range of deferq_jobs_behind.
UPDATE {jobs} SET priority = priority - 20
WHERE key IS NOT NULL AND state = 'queued' AND priority >= 20
  AND NOT EXISTS (SELECT 1 FROM {jobs} AS h WHERE h.key = {jobs}.key
                  AND h.state IN ('queued', 'active') AND h.priority < 20)

-- name: claim
-- Due jobs of ONE queue and priority, in claim order: one range of the partial index
-- deferq_jobs_waiting, so a probe stays O(log n) however many jobs have finished
-- (S3-2). The backend probes every queue of a priority level (merging them by due
-- time) and goes on to the next level only when short, then leases the chosen rows
-- with `lease`, all in one BEGIN IMMEDIATE transaction: no one else can claim them
-- in between, which is what SKIP LOCKED buys elsewhere. Positional parameters, a
-- tuple per probe: (queue, priority, now, limit). The last column: never leased before
-- (the job has no durable-step checkpoints yet). A paused queue gives nothing: the
-- test names the queue, not the row, so it is made once per probe.
SELECT run_at, seq, last_worker IS NULL FROM {jobs}
WHERE state = 'queued' AND queue = ?1 AND priority = ?2 AND run_at <= ?3
  AND NOT EXISTS (SELECT 1 FROM {paused} WHERE queue = ?1)
ORDER BY run_at, seq
LIMIT ?4

-- name: claim_fair
-- The same for a fair level (a priority + 10, fair.py): in (virtual time, seq) order,
-- one range of deferq_jobs_fair (named: with due times in the query, the planner may
-- prefer deferq_jobs_waiting and sort every row of the level). Every job there is due.
SELECT vtime, seq, last_worker IS NULL FROM {jobs} INDEXED BY deferq_jobs_fair
WHERE state = 'queued' AND queue = ?1 AND priority = ?2 AND vtime IS NOT NULL AND run_at <= ?3
  AND NOT EXISTS (SELECT 1 FROM {paused} WHERE queue = ?1)
ORDER BY vtime, seq
LIMIT ?4

-- name: fair_floor
-- A fair level's floor (fair.py): the least virtual time waiting there, else the most
-- a key of it has reached. Two index probes.
SELECT coalesce(
    (SELECT vtime FROM {jobs} WHERE state = 'queued' AND queue = :queue AND priority = :level
       AND vtime IS NOT NULL ORDER BY vtime LIMIT 1),
    (SELECT next_vtime FROM {fair} WHERE queue = :queue AND priority = :level
     ORDER BY next_vtime DESC LIMIT 1))

-- name: fair_forget
-- The keys whose next virtual time is behind the floor: they would start at the floor
-- anyway (one range of deferq_fair_reached).
DELETE FROM {fair} WHERE queue = :queue AND priority = :level AND next_vtime < :floor

-- name: fair_next
-- A key's next virtual time at a fair level (no row: it has none).
SELECT next_vtime FROM {fair} WHERE queue = :queue AND priority = :level AND fair_key = :key

-- name: fair_save
-- A key's next virtual time, never moved back.
INSERT INTO {fair} (queue, priority, fair_key, next_vtime) VALUES (:queue, :level, :key, :next)
ON CONFLICT (queue, priority, fair_key) DO UPDATE SET next_vtime = max(next_vtime, excluded.next_vtime)

-- name: lease
-- The chosen rows leased, except those whose expiry has passed: cancelled instead
-- ("expired"), their attempt not counted; the backend leaves them out of its answer.
UPDATE {jobs} SET
    state = CASE WHEN expires_at <= {now} THEN 'cancelled' ELSE 'active' END,
    attempts = CASE WHEN expires_at <= {now} THEN attempts ELSE attempts + 1 END,
    worker = CASE WHEN expires_at <= {now} THEN NULL ELSE :worker END,
    lease_until = CASE WHEN expires_at <= {now} THEN NULL ELSE {now} + :lease END,
    error = CASE WHEN expires_at <= {now} THEN 'expired' ELSE error END,
    finished_at = CASE WHEN expires_at <= {now} THEN {now} END,
    last_worker = CASE WHEN expires_at <= {now} THEN last_worker ELSE :worker END,
    updated_at = {now}
WHERE seq IN (SELECT value FROM json_each(:seqs))
RETURNING {job_columns}, {now}, seq

-- name: heartbeat
-- One job, fenced by (worker, attempts): a lease that changed hands is not extended.
-- The backend runs one per job, in one transaction (PostgreSQL unnests arrays). The
-- rows returned are the leases that held, and whether someone asked the job to stop.
UPDATE {jobs} SET lease_until = {now} + :lease
WHERE id = :id AND state = 'active' AND worker = :worker AND attempts = :attempts
RETURNING id, cancel_requested_at

-- name: progress
-- What a running task last reported, fenced like heartbeat (one per job, one transaction).
UPDATE {jobs} SET progress = :progress, progress_message = :message
WHERE id = :id AND state = 'active' AND worker = :worker AND attempts = :attempts

-- name: settle
-- One outcome, fenced like heartbeat. :state is the new stored state; the CASEs keep
-- the columns an outcome does not touch (memory.py's _settled, in SQL). SET reads the
-- old row, whatever the order of assignments (as on PostgreSQL, unlike MySQL). A job
-- whose cancel was requested ends cancelled unless it succeeded (base.py).
UPDATE {jobs} SET
    state = CASE WHEN cancel_requested_at IS NOT NULL AND :state <> 'succeeded' THEN 'cancelled'
                 ELSE :state END,
    attempts = attempts - :released,
    run_at = CASE WHEN :kind IN ('retry', 'snooze') THEN coalesce(:due, {now} + :delay) ELSE run_at END,
    error = CASE WHEN :kind IN ('retry', 'dead', 'cancelled') THEN :error ELSE error END,
    result = CASE WHEN :kind = 'succeeded' THEN :result ELSE result END,
    -- due later: a job at its fair level waits at its plain one (fair.py)
    priority = CASE WHEN :kind IN ('retry', 'snooze') AND priority >= 10 THEN priority - 10 ELSE priority END,
    vtime = CASE WHEN :kind IN ('retry', 'snooze') THEN NULL ELSE vtime END,
    finished_at = CASE WHEN :state <> 'queued' OR cancel_requested_at IS NOT NULL THEN {now} END,
    waits_for = :waits_for,
    chunk_call = coalesce(:chunk_call, chunk_call),
    worker = NULL,
    lease_until = NULL,
    updated_at = {now}
WHERE id = :id AND state = 'active' AND worker = :worker AND attempts = :attempts

-- name: succeed
-- `settle` for the commonest outcome, a job that succeeded and returned nothing:
-- nothing to decide, so the jobs of one lease holder, attempt and chunk call (a chunk
-- call's, most of a batch) are one statement, their ids a JSON array: no statement
-- run per job (settle_plan). Positional parameters: (now, ids, worker, attempts,
-- chunk call or NULL). A job that waited for an event waits for nothing now, as after
-- `settle`. `+state`: each job is found by its id; the planner would
-- rather read every active job through an index on the state and test its id.
UPDATE {jobs} SET state = 'succeeded', finished_at = ?1, worker = NULL, lease_until = NULL, updated_at = ?1,
    waits_for = NULL, chunk_call = coalesce(?5, chunk_call)
WHERE id IN (SELECT value FROM json_each(?2)) AND +state = 'active' AND worker = ?3 AND attempts = ?4

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
-- and priority (min() over `queue IN (...)` could read every waiting row).
SELECT min((SELECT run_at FROM {jobs}
            WHERE state = 'queued' AND queue = q.value AND priority = p.value
            ORDER BY run_at LIMIT 1)),
       {now}
FROM json_each(:queues) AS q, json_each('[0, 1, 2, 10, 11, 12]') AS p
WHERE q.value NOT IN (SELECT queue FROM {paused})

-- name: get
SELECT {job_columns}, {now} FROM {jobs} WHERE id = :id

-- name: get_by_key
SELECT {job_columns}, {now} FROM {jobs} WHERE key = :key ORDER BY seq DESC LIMIT 1

-- name: window_holder
-- The newest job with a key, in the enqueue's transaction before its insert (the
-- deduplication window: base.py window_plan).
-- (the write transaction, BEGIN IMMEDIATE, already keeps every other writer out).
SELECT {job_columns}, {now} FROM {jobs} WHERE key = :key ORDER BY seq DESC LIMIT 1

-- name: cancel
-- A waiting job is cancelled; an active one is asked to stop: its worker hears it at
-- its next heartbeat, and its outcome is stored as cancelled.
UPDATE {jobs} SET
    finished_at = CASE WHEN state IN ('queued', 'blocked') THEN {now} ELSE finished_at END,
    cancel_requested_at = CASE WHEN state = 'active' THEN coalesce(cancel_requested_at, {now}) END,
    state = CASE WHEN state IN ('queued', 'blocked') THEN 'cancelled' ELSE state END,
    updated_at = {now}
WHERE id = :id AND state IN ('queued', 'active', 'blocked')

-- name: wake
-- A job waiting for its due time is due now (a durable step's event came).
UPDATE {jobs} SET run_at = {now}, updated_at = {now}
WHERE id = :id AND state = 'queued' AND run_at > {now}

-- name: retry_dead
-- Back to the end of the line: a fresh seq (seq is the rowid; one writer at a time,
-- so max + 1 is free). Fails on deferq_jobs_live_key when a newer job holds its key
-- (the caller answers False).
UPDATE {jobs} SET state = 'queued', attempts = 0, run_at = {now}, finished_at = NULL, updated_at = {now},
                  seq = (SELECT max(seq) + 1 FROM {jobs})
WHERE id = :id AND state = 'dead'

-- name: rerun
-- A finished job (succeeded, dead or cancelled) queued again, due now, its attempts reset,
-- its result and cancel request cleared (a durable job retried from one of its steps). Fails
-- on deferq_jobs_live_key when a newer job holds its key (the caller answers False).
UPDATE {jobs} SET state = 'queued', attempts = 0, run_at = {now}, finished_at = NULL, updated_at = {now},
                  result = NULL, cancel_requested_at = NULL, waits_for = NULL,
                  seq = (SELECT max(seq) + 1 FROM {jobs})
WHERE id = :id AND state IN ('succeeded', 'dead', 'cancelled')

-- name: run_now
-- A scheduled job (queued, due later) becomes due now; its attempts are kept.
UPDATE {jobs} SET run_at = {now}, updated_at = {now}
WHERE id = :id AND state = 'queued' AND run_at > {now}

-- name: list_scheduled
SELECT {job_columns}, {now} FROM {jobs}
WHERE state = 'queued' AND state <> 'active' AND run_at > {now} AND (:queue IS NULL OR queue = :queue)
ORDER BY run_at DESC, seq DESC LIMIT :limit

-- name: list_queued
SELECT {job_columns}, {now} FROM {jobs}
WHERE state = 'queued' AND state <> 'active' AND run_at <= {now} AND (:queue IS NULL OR queue = :queue)
ORDER BY run_at DESC, seq DESC LIMIT :limit

-- name: list_active
SELECT {job_columns}, {now} FROM {jobs}
WHERE state = 'active' AND (:queue IS NULL OR queue = :queue)
ORDER BY run_at DESC, seq DESC LIMIT :limit

-- name: list_finished
SELECT {job_columns}, {now} FROM {jobs}
WHERE state = :state AND state <> 'active' AND (:queue IS NULL OR queue = :queue)
ORDER BY finished_at DESC, seq DESC LIMIT :limit

-- name: purge
-- In slices of :batch rows, each its own short transaction: readers never wait (WAL),
-- but every writer would wait for one long delete.
DELETE FROM {jobs} WHERE seq IN (
    SELECT seq FROM {jobs}
    WHERE state IN (SELECT value FROM json_each(:states)) AND finished_at <= {now} - :older_than
    LIMIT :batch)

-- name: stats
SELECT queue,
       CASE WHEN state = 'queued' AND run_at > {now} THEN 'scheduled' ELSE state END AS shown,
       count(*),
       max(CASE WHEN state = 'queued' AND run_at <= {now} THEN {now} - run_at END)
FROM {jobs} GROUP BY 1, 2

-- name: delete
DELETE FROM {jobs} WHERE id = :id AND state IN ('succeeded', 'dead', 'cancelled')

-- name: set_remark
UPDATE {jobs} SET remark = :remark, updated_at = {now} WHERE id = :id

-- name: reseal
-- deferq encryption rotate: an encrypted value replaced where the job still holds it whole:
-- a JSON string in the payload or result (:old_json, with its quotes), or the whole error
-- or progress message. Payload and result stay BLOBs.
UPDATE {jobs} SET payload = CAST(replace(CAST(payload AS TEXT), :old_json, :new_json) AS BLOB),
    result = CAST(replace(CAST(result AS TEXT), :old_json, :new_json) AS BLOB),
    error = CASE WHEN error = :old THEN :new ELSE error END,
    progress_message = CASE WHEN progress_message = :old THEN :new ELSE progress_message END
WHERE id = :id AND (instr(CAST(payload AS TEXT), :old_json) > 0 OR instr(CAST(result AS TEXT), :old_json) > 0
    OR error = :old OR progress_message = :old)

-- name: pause
INSERT OR IGNORE INTO {paused} (queue, paused_at) VALUES (:queue, {now})

-- name: resume
-- Idle workers see the commit (data_version) and look again.
DELETE FROM {paused} WHERE queue = :queue

-- name: paused
SELECT queue, paused_at FROM {paused}

-- name: kv_put
INSERT OR REPLACE INTO {kv} (namespace, key, value, expires_at)
VALUES (:namespace, :key, :value, {now} + :ttl)

-- name: kv_expire
-- Every live record of a namespace expires ttl seconds from now (a job's checkpoints
-- once it has ended: steps/checkpoints.py).
UPDATE {kv} SET expires_at = {now} + :ttl
WHERE namespace = :namespace AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_expire_many
-- The same for several namespaces (the checkpoints of a settled batch's jobs).
UPDATE {kv} SET expires_at = {now} + :ttl
WHERE namespace IN (SELECT value FROM json_each(:namespaces)) AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_delete_expired
DELETE FROM {kv} WHERE namespace = :namespace AND key = :key AND expires_at <= {now}

-- name: kv_insert_new
INSERT OR IGNORE INTO {kv} (namespace, key, value, expires_at)
VALUES (:namespace, :key, :value, {now} + :ttl)

-- name: kv_put_leased
-- A leased job's own record (a durable step's checkpoint) in one statement: stored only
-- while the job is still this attempt's (fenced like heartbeat), unless a live record
-- is there (an expired one is replaced). 1 row: stored; 0: the lease was lost or a
-- record won (`kv_lease_check` says which).
INSERT INTO {kv} (namespace, key, value, expires_at)
SELECT :namespace, :key, :value, NULL FROM {jobs}
WHERE id = :id AND state = 'active' AND worker = :worker AND attempts = :attempts
ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, expires_at = NULL
WHERE expires_at <= {now}

-- name: kv_lease_check
-- After a kv_put_leased that stored nothing: whether the job is still this attempt's,
-- and the live record that won.
SELECT EXISTS (SELECT 1 FROM {jobs}
               WHERE id = :id AND state = 'active' AND worker = :worker AND attempts = :attempts),
       (SELECT value FROM {kv}
        WHERE namespace = :namespace AND key = :key AND (expires_at IS NULL OR expires_at > {now}))

-- name: kv_lock
-- A kv record the write transaction (BEGIN IMMEDIATE) holds (rate_take, slot_take).
SELECT value, {now} FROM {kv} WHERE namespace = :namespace AND key = :key

-- name: kv_swap
-- Compare-and-set: the row count says whether the live record held the expected value.
UPDATE {kv} SET value = :value, expires_at = {now} + :ttl
WHERE namespace = :namespace AND key = :key AND value = :expected
  AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_get
SELECT value FROM {kv}
WHERE namespace = :namespace AND key = :key AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_delete
DELETE FROM {kv}
WHERE namespace = :namespace AND key = :key AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_list
SELECT key, value FROM {kv}
WHERE namespace = :namespace AND (expires_at IS NULL OR expires_at > {now})

-- name: kv_list_many
-- The live records of several namespaces (the checkpoints of jobs just leased).
SELECT namespace, key, value FROM {kv}
WHERE namespace IN (SELECT value FROM json_each(:namespaces)) AND (expires_at IS NULL OR expires_at > {now})

-- name: migrations_table
-- Whether the migrations table exists (a new file has none; PostgreSQL and MySQL
-- learn it from the error of reading it).
SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '{migrations}'

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS {migrations} (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at REAL NOT NULL
)

-- name: applied_migrations
SELECT version FROM {migrations} ORDER BY version

-- name: record_migration
INSERT INTO {migrations} (version, name, applied_at) VALUES (:version, :name, {now})

-- -- dependencies (options(after=...)): backends/deps.py says the rules ------------

-- name: parent_states
-- The parents named by jobs being enqueued, locked (SQLite has one writer at a time: no lock needed): a parent that settles
-- meanwhile waits for this transaction, then finds the edges it adds.
SELECT id, state FROM {jobs} WHERE id IN (SELECT value FROM json_each(:ids))

-- name: link
INSERT INTO {deps} (parent, child, after_any) VALUES (:parent, :child, :after_any)

-- name: block
-- A new job that waits for :blockers parents (one edge each).
UPDATE {jobs} SET state = 'blocked', blockers = blockers + :blockers, updated_at = {now}
WHERE id = :id AND state = 'queued'

-- name: cancel_blocked
-- A child whose parent went dead or was cancelled (or a new job whose parent had).
UPDATE {jobs} SET state = 'cancelled', updated_at = {now}, error = :error, finished_at = {now}
WHERE id = :id AND state IN ('queued', 'blocked')

-- name: finished_parents
-- Which of these jobs others wait for, now that they have finished (a parent purged
-- counts as cancelled), with their states.
SELECT DISTINCT d.parent, p.state FROM {deps} AS d LEFT JOIN {jobs} AS p ON p.id = d.parent
WHERE d.parent IN (SELECT value FROM json_each(:ids)) AND (p.state IS NULL OR p.state IN ('succeeded', 'dead', 'cancelled'))

-- name: finished_parents_all
-- The sweep (recover_expired): any finished job others still wait for, e.g. one
-- whose lease expired, or one cancelled at its claim because it had expired.
SELECT DISTINCT d.parent, p.state FROM {deps} AS d LEFT JOIN {jobs} AS p ON p.id = d.parent
WHERE p.state IS NULL OR p.state IN ('succeeded', 'dead', 'cancelled')
LIMIT 1000

-- name: any_edges
-- Whether any job waits for another: a settle's jobs then have no edges to take away
-- (one probe a batch instead of one per job, in the settle's write transaction).
SELECT EXISTS (SELECT 1 FROM {deps})

-- name: take_edges
-- The edges of the finished parents among :ids, taken away (exactly once: only the
-- transaction that deletes an edge acts on it), with each parent's state.
DELETE FROM {deps}
WHERE parent IN (SELECT value FROM json_each(:ids))
  AND NOT EXISTS (SELECT 1 FROM {jobs} AS p WHERE p.id = {deps}.parent
                  AND p.state NOT IN ('succeeded', 'dead', 'cancelled'))
RETURNING parent, child, after_any, (SELECT p.state FROM {jobs} AS p WHERE p.id = {deps}.parent)

-- name: release_child
-- A child :taken edges fewer: queued when none are left, cancelled with :error (a
-- parent failed), else still blocked; a child no longer blocked (cancelled by
-- another parent, or by hand) only counts. Each assignment reads the old row.
UPDATE {jobs} SET
    error = CASE WHEN state = 'blocked' AND :error IS NOT NULL THEN :error ELSE error END,
    finished_at = CASE WHEN state = 'blocked' AND :error IS NOT NULL THEN {now} ELSE finished_at END,
    run_at = CASE WHEN state = 'blocked' AND :error IS NULL AND blockers <= :taken THEN max(run_at, {now})
                  ELSE run_at END,
    updated_at = CASE WHEN state = 'blocked' AND (:error IS NOT NULL OR blockers <= :taken) THEN {now}
                      ELSE updated_at END,
    state = CASE WHEN state <> 'blocked' THEN state WHEN :error IS NOT NULL THEN 'cancelled'
                 WHEN blockers <= :taken THEN 'queued' ELSE 'blocked' END,
    blockers = blockers - :taken
WHERE id = :child

-- name: count_states
-- A batch's members by state (batch.py): one query for all of them.
SELECT state, count(*) FROM {jobs} WHERE id IN (SELECT value FROM json_each(:ids)) GROUP BY state

-- name: dependents
-- The jobs still waiting for this one (`deferq job`, GET /v1/jobs/{id}).
SELECT child FROM {deps} WHERE parent = :id ORDER BY child LIMIT 100

-- name: history_add
-- The per-minute history (deferq/observe/history.py): add to a counter. A batch of rows runs
-- as one prepared statement in one transaction.
INSERT INTO {history} (minute, queue, task, field, amount)
VALUES (:minute, :queue, :task, :field, :amount)
ON CONFLICT (minute, queue, task, field) DO UPDATE SET amount = amount + excluded.amount

-- name: history_read
SELECT minute, field, SUM(amount) FROM {history}
WHERE minute >= :first AND minute < :end
  AND (:queue IS NULL OR queue = :queue) AND (:task IS NULL OR task = :task)
GROUP BY minute, field

-- name: history_prune
DELETE FROM {history} WHERE minute < :before

-- name: history_forget
-- One queue's counters of a span of minutes (`deferq bench` removes its own).
DELETE FROM {history} WHERE queue = :queue AND minute >= :first AND minute < :end

-- name: find_jobs
-- Listing and searching (backends/search.py, sql/search.py): this, then the find_*
-- conditions that apply joined by AND, then find_order. seq last: the keyset cursor.
SELECT {job_columns}, {now}, seq FROM {jobs} WHERE

-- name: find_state
state = :state

-- name: find_scheduled
run_at > {now}

-- name: find_due
run_at <= {now}

-- name: find_queue
queue = :queue

-- name: find_task
task = :task

-- name: find_tag
-- the tag given quoted, as the JSON array holds it (search.tag_text)
instr(tags, :tag) > 0

-- name: find_chunk
-- the jobs a chunk call last ran, through deferq_jobs_chunk_call
chunk_call = :chunk

-- name: find_after
seq < :after

-- name: find_order
ORDER BY seq DESC LIMIT :limit

-- name: find_text
-- The FTS5 trigram index (migration 0009); :text is an FTS5 string ("...").
seq IN (SELECT rowid FROM {jobs_fts} WHERE {jobs_fts} MATCH :text)

-- name: text_unindex
-- Indexing a batch of changed rows (sqlite.py index_text), in one write transaction, so
-- the three statements see the same batch: out with their old text, in with the new
-- (a deleted job has none), off the pending list.
DELETE FROM {jobs_fts} WHERE rowid IN (SELECT seq FROM {jobs_fts_pending} ORDER BY seq LIMIT :batch)

-- name: text_index
-- Encrypted arguments and errors (encryption/jobs.py: '{"$enc":"$enc:' and '$enc:') are
-- left out: their text finds nothing, and its random trigrams cost 5x a plain payload's.
INSERT INTO {jobs_fts} (rowid, text)
SELECT seq, CASE WHEN instr(CAST(payload AS TEXT), '{"$enc":"$enc:') > 0 THEN '' ELSE CAST(payload AS TEXT) END
    || ' ' || CASE WHEN substr(error, 1, 5) = '$enc:' THEN '' ELSE coalesce(error, '') END
    || ' ' || coalesce(key, '') FROM {jobs}
WHERE seq IN (SELECT seq FROM {jobs_fts_pending} ORDER BY seq LIMIT :batch)

-- name: text_indexed
DELETE FROM {jobs_fts_pending} WHERE seq IN (SELECT seq FROM {jobs_fts_pending} ORDER BY seq LIMIT :batch)

-- name: text_pending
SELECT EXISTS (SELECT 1 FROM {jobs_fts_pending})

-- name: hold_prune
-- A limit's notes of held jobs whose time has come (their jobs are due: nothing to give back).
DELETE FROM {holds} WHERE name = :name AND due <= {now}

-- name: hold
-- A leased job snoozes until :due for the limit :name (limits/__init__.py, limit_hold).
INSERT OR REPLACE INTO {holds} (name, job_id, due) VALUES (:name, :job_id, :due)

-- name: holds_taken
-- A batch of a limit's notes (limit_release), the soonest due first.
SELECT job_id, due FROM {holds} WHERE name = :name ORDER BY due LIMIT :batch

-- name: hold_release
-- The noted job is due now if it still waits for the time noted (within :slack).
UPDATE {jobs} SET run_at = {now}, updated_at = {now}
WHERE id = :job_id AND state = 'queued' AND run_at > {now} AND abs(run_at - :due) <= :slack

-- name: hold_drop
DELETE FROM {holds} WHERE name = :name AND job_id = :job_id
