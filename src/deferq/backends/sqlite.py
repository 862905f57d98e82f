"""sqlite:///path — the embedded default: one file, safe for many processes.

- WAL journal, so readers never block the writer; every write starts with
  BEGIN IMMEDIATE (a read that later upgrades to a write can deadlock into
  SQLITE_BUSY), with a busy timeout.
- Claiming stays O(log n) (S3-2): waiting jobs live in a partial index ordered by
  (queue, priority, run_at, seq); finished rows are outside it.
- The clock is this machine's: SQLite is embedded, so every process that opens the
  file shares one clock.
- Idle workers watch `PRAGMA data_version` (a read of shared memory, no I/O): every
  2 ms right after activity, stretching to every 25 ms as the quiet lasts, so a new
  job is picked up in milliseconds without a server to push notifications.
- `synchronous=NORMAL` by default: a process crash loses nothing; a power cut may lose
  the last transactions. Add `?synchronous=full` to the URL to fsync every commit.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..errors import ConfigError, StoreUnavailable
from ..job import FINISHED_STATES, Job, JobState, dumps
from .base import Backend, Enqueue, Outcome, QueueStats, finished_only
from .rows import COLUMNS, job_from_row

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS deferq_jobs (
    seq          INTEGER PRIMARY KEY,   -- enqueue order: FIFO among equal due times
    id           TEXT NOT NULL UNIQUE,
    task         TEXT NOT NULL,
    payload      BLOB NOT NULL,         -- JSON [args, kwargs]
    queue        TEXT NOT NULL,
    priority     INTEGER NOT NULL,
    state        TEXT NOT NULL,         -- queued (waiting) | active | succeeded | dead | cancelled
    attempts     INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    timeout      REAL,
    key          TEXT,
    run_at       REAL NOT NULL,
    created_at   REAL NOT NULL,
    lease_until  REAL,
    worker       TEXT,
    error        TEXT,
    result       BLOB,
    finished_at  REAL
);
CREATE INDEX IF NOT EXISTS deferq_jobs_waiting
    ON deferq_jobs (queue, priority, run_at, seq) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS deferq_jobs_leased
    ON deferq_jobs (lease_until) WHERE state = 'active';
CREATE UNIQUE INDEX IF NOT EXISTS deferq_jobs_live_key
    ON deferq_jobs (key) WHERE key IS NOT NULL AND state IN ('queued', 'active');
CREATE INDEX IF NOT EXISTS deferq_jobs_key ON deferq_jobs (key, seq) WHERE key IS NOT NULL;
CREATE INDEX IF NOT EXISTS deferq_jobs_finished
    ON deferq_jobs (state, finished_at) WHERE finished_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS deferq_kv (
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      BLOB NOT NULL,
    expires_at REAL,
    PRIMARY KEY (namespace, key)
);
"""

INSERT = (  # only what a new job has; the other columns start NULL or at their default
    "INSERT OR IGNORE INTO deferq_jobs (id, task, payload, queue, priority, state, "
    "max_attempts, timeout, key, run_at, created_at) VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?)"
)
FENCE = "id = ? AND state = 'active' AND worker = ? AND attempts = ?"
POLL_MIN, POLL_MAX = 0.002, 0.025  # seconds between data_version polls of an idle worker


class SQLiteBackend(Backend):
    schemes = ("sqlite",)

    def __init__(self, url: str = "sqlite:///deferq.db", **_: Any) -> None:
        parts = urlsplit(url)
        rest = url.split("://", 1)[1].split("?", 1)[0]
        path = rest[1:] if rest.startswith("/") else rest  # sqlite:///rel, sqlite:////abs
        if not path:
            raise ConfigError(f"the SQLite URL {url!r} names no file: use sqlite:///deferq.db")
        query = parse_qs(parts.query)
        self.synchronous = query.get("synchronous", ["normal"])[0].upper()
        if self.synchronous not in ("OFF", "NORMAL", "FULL"):
            raise ConfigError(f"synchronous={self.synchronous.lower()} must be off, normal or full")
        self.path = path
        self._local = threading.local()
        self._poll = POLL_MIN
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._open_schema()

    # -- connections -------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30.0
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute("PRAGMA busy_timeout=30000")
        except (sqlite3.OperationalError, OSError) as exc:
            raise ConfigError(f"cannot open the SQLite database {self.path!r}: {exc}") from None
        with self._lock:
            self._all.append(conn)
        return conn

    @property
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    def _open_schema(self) -> None:
        conn = self._conn
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version < SCHEMA_VERSION:
                with self._write() as cur:
                    cur.executescript("BEGIN IMMEDIATE;" + SCHEMA)
                    cur.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.OperationalError as exc:
            raise ConfigError(f"cannot use the SQLite database {self.path!r}: {exc}") from None

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Cursor]:
        """One write transaction, started IMMEDIATE so it never deadlocks on upgrade."""
        cur = self._conn.cursor()
        try:
            if not self._conn.in_transaction:
                cur.execute("BEGIN IMMEDIATE")
            yield cur
            cur.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                cur.execute("ROLLBACK")
            raise
        finally:
            cur.close()

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            raise StoreUnavailable(f"SQLite {self.path!r}: {exc}") from None

    def now(self) -> float:
        return time.time()

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()

    # -- rows <-> jobs ----------------------------------------------------------------

    @staticmethod
    def _row(job: Job, payload: bytes) -> tuple[Any, ...]:
        return (
            job.id, job.task, payload or dumps([job.args, job.kwargs]), job.queue, job.priority,
            job.max_attempts, job.timeout, job.key, job.run_at, job.created_at,
        )  # fmt: skip

    def _select(self, where: str, params: Sequence[Any] = (), tail: str = "") -> list[Job]:
        rows = self._read(f"SELECT {COLUMNS} FROM deferq_jobs WHERE {where} {tail}", params)
        now = self.now()
        return [job_from_row(row, now) for row in rows]

    # -- producing ------------------------------------------------------------------

    def enqueue_many(self, items: Sequence[Enqueue], connection: Any = None) -> list[Job]:
        self.refuse_connection(connection)
        now = self.now()
        jobs = [item.stored(now) for item in items]
        rows = [self._row(job, item.payload) for job, item in zip(jobs, items, strict=True)]
        if len(jobs) == 1 and jobs[0].key is None and not self._conn.in_transaction:
            self._conn.execute(INSERT, rows[0])  # one statement is its own transaction
            return jobs
        with self._write() as cur:
            if all(job.key is None for job in jobs):
                cur.executemany(INSERT, rows)
                return jobs
            stored = []
            for job, row in zip(jobs, rows, strict=True):
                cur.execute(INSERT, row)
                if cur.rowcount == 1:
                    stored.append(job)
                    continue
                row = cur.execute(
                    f"SELECT {COLUMNS} FROM deferq_jobs WHERE key = ? AND state IN "
                    "('queued', 'active')",
                    (job.key,),
                ).fetchone()
                stored.append(job_from_row(row, now))
        return stored

    # -- consuming ------------------------------------------------------------------

    def reserve(
        self, queues: Sequence[str], limit: int, worker: str, lease: float, priorities: Sequence[int]
    ) -> list[Job]:
        if limit <= 0:
            return []
        with self._write() as cur:
            now = self.now()
            chosen: list[int] = []
            for priority in priorities:
                want = limit - len(chosen)
                if want <= 0:
                    break
                candidates: list[tuple[float, int]] = []
                for queue in queues:  # one index range per queue keeps each probe O(log n)
                    candidates += cur.execute(
                        "SELECT run_at, seq FROM deferq_jobs WHERE state = 'queued' AND queue = ? "
                        "AND priority = ? AND run_at <= ? ORDER BY run_at, seq LIMIT ?",
                        (queue, priority, now, want),
                    ).fetchall()
                chosen += [seq for _, seq in sorted(candidates)[:want]]
            if not chosen:
                return []
            marks = ",".join("?" * len(chosen))
            rows = cur.execute(
                f"UPDATE deferq_jobs SET state = 'active', attempts = attempts + 1, worker = ?, "
                f"lease_until = ? WHERE seq IN ({marks}) RETURNING {COLUMNS}, run_at, seq",
                (worker, now + lease, *chosen),
            ).fetchall()
        order = {seq: i for i, seq in enumerate(chosen)}
        rows.sort(key=lambda r: order[r[-1]])
        return [job_from_row(row[:-2], now) for row in rows]

    def heartbeat(self, jobs: Sequence[Job], lease: float) -> set[str]:
        lost = set()
        with self._write() as cur:
            until = self.now() + lease
            for job in jobs:
                cur.execute(
                    f"UPDATE deferq_jobs SET lease_until = ? WHERE {FENCE}",
                    (until, job.id, job.worker, job.attempts),
                )
                if cur.rowcount == 0:
                    lost.add(job.id)
        return lost

    def settle(self, outcomes: Sequence[Outcome]) -> list[bool]:
        with self._write() as cur:
            now = self.now()
            if all(o.kind == "succeeded" and o.result is None for o in outcomes):
                # the hot path of no-result jobs: one statement for the batch; if every
                # lease held, the total row count says so, else undo and go one by one
                cur.execute("SAVEPOINT batch")
                cur.executemany(
                    f"UPDATE deferq_jobs SET state = 'succeeded', finished_at = ?, worker = NULL, "
                    f"lease_until = NULL WHERE {FENCE}",
                    [(now, o.job.id, o.job.worker, o.job.attempts) for o in outcomes],
                )
                if cur.rowcount == len(outcomes):
                    cur.execute("RELEASE batch")
                    return [True] * len(outcomes)
                cur.execute("ROLLBACK TO batch")
                cur.execute("RELEASE batch")
            applied = []
            for outcome in outcomes:
                sets, params = _settle_columns(outcome, now)
                job = outcome.job
                cur.execute(
                    f"UPDATE deferq_jobs SET {sets}, worker = NULL, lease_until = NULL "
                    f"WHERE {FENCE}",
                    (*params, job.id, job.worker, job.attempts),
                )
                applied.append(cur.rowcount == 1)
        return applied

    def recover_expired(self) -> int:
        with self._write() as cur:
            now = self.now()
            reason = "lease expired (its worker stopped heartbeating)"
            cur.execute(
                "UPDATE deferq_jobs SET state = CASE WHEN attempts >= max_attempts THEN 'dead' "
                "ELSE 'queued' END, finished_at = CASE WHEN attempts >= max_attempts THEN ? END, "
                "error = ?, worker = NULL, lease_until = NULL "
                "WHERE state = 'active' AND lease_until < ?",
                (now, reason, now),
            )
            return cur.rowcount

    def _next_due(self, queues: Sequence[str]) -> float | None:
        marks = ",".join("?" * len(queues))
        due = [
            self._read(
                "SELECT min(run_at) FROM deferq_jobs WHERE state = 'queued' "
                f"AND queue IN ({marks}) AND priority = ?",
                (*queues, priority),
            )[0][0]
            for priority in (0, 1, 2)
        ]
        return min((d for d in due if d is not None), default=None)

    def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        deadline = self.now() + timeout
        next_due = self._next_due(queues)
        if next_due is not None:
            deadline = min(deadline, next_due)
        conn = self._conn
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        while (left := deadline - time.time()) > 0:
            # poll fast right after activity, slower as the quiet lasts: idle costs
            # well under 1% of a core, a new job waits a few ms
            self._poll = min(self._poll * 1.5, POLL_MAX)
            time.sleep(min(self._poll, left))
            if conn.execute("PRAGMA data_version").fetchone()[0] != version:
                self._poll = POLL_MIN
                return

    # -- inspecting and managing ----------------------------------------------------

    def get(self, job_id: str) -> Job | None:
        found = self._select("id = ?", (job_id,))
        return found[0] if found else None

    def get_by_key(self, key: str) -> Job | None:
        found = self._select("key = ?", (key,), "ORDER BY seq DESC LIMIT 1")
        return found[0] if found else None

    def cancel(self, job_id: str) -> bool:
        with self._write() as cur:
            cur.execute(
                "UPDATE deferq_jobs SET state = 'cancelled', finished_at = ? "
                "WHERE id = ? AND state = 'queued'",
                (self.now(), job_id),
            )
            return cur.rowcount == 1

    def retry_dead(self, job_id: str) -> bool:
        with self._write() as cur:
            try:
                cur.execute(
                    "UPDATE deferq_jobs SET state = 'queued', attempts = 0, run_at = ?, "
                    "finished_at = NULL, seq = (SELECT max(seq) + 1 FROM deferq_jobs) "
                    "WHERE id = ? AND state = 'dead'",
                    (self.now(), job_id),
                )
            except sqlite3.IntegrityError:
                return False  # its key is held by a newer unfinished job
            return cur.rowcount == 1

    def list_jobs(self, state: JobState, queue: str | None = None, limit: int = 100) -> list[Job]:
        state = JobState(state)
        now = self.now()
        where, params = _state_filter(state, now)
        if queue is not None:
            where += " AND queue = ?"
            params.append(queue)
        order = "finished_at DESC" if state in FINISHED_STATES else "run_at DESC, seq DESC"
        return self._select(where, params, f"ORDER BY {order} LIMIT {int(limit)}")

    def purge(self, states: Iterable[JobState], older_than: float = 0.0) -> int:
        states = finished_only(states)
        if not states:
            return 0
        with self._write() as cur:
            cur.execute(
                f"DELETE FROM deferq_jobs WHERE state IN ({','.join('?' * len(states))}) "
                "AND finished_at <= ?",
                (*map(str, states), self.now() - older_than),
            )
            return cur.rowcount

    def stats(self) -> dict[str, QueueStats]:
        now = self.now()
        rows = self._read(
            "SELECT queue, CASE WHEN state = 'queued' AND run_at > ?1 THEN 'scheduled' "
            "ELSE state END AS s, count(*), max(CASE WHEN state = 'queued' AND run_at <= ?1 "
            "THEN ?1 - run_at END) FROM deferq_jobs GROUP BY queue, s",
            (now,),
        )
        result: dict[str, QueueStats] = {}
        for queue, state, count, oldest in rows:
            stats = result.setdefault(queue, QueueStats())
            stats.counts[state] = count
            if oldest:
                stats.oldest_wait = max(stats.oldest_wait, oldest)
        return result

    # -- kv -----------------------------------------------------------------------

    def kv_put(
        self, namespace: str, key: str, value: bytes, ttl: float | None = None, only_new: bool = False
    ) -> bool:
        now = self.now()
        expires = now + ttl if ttl else None
        with self._write() as cur:
            if only_new:
                cur.execute(
                    "DELETE FROM deferq_kv WHERE namespace = ? AND key = ? AND expires_at <= ?",
                    (namespace, key, now),
                )
                cur.execute(
                    "INSERT OR IGNORE INTO deferq_kv VALUES (?, ?, ?, ?)",
                    (namespace, key, value, expires),
                )
                return cur.rowcount == 1
            cur.execute(
                "INSERT OR REPLACE INTO deferq_kv VALUES (?, ?, ?, ?)",
                (namespace, key, value, expires),
            )
            return True

    def kv_get(self, namespace: str, key: str) -> bytes | None:
        rows = self._read(
            "SELECT value FROM deferq_kv WHERE namespace = ? AND key = ? "
            "AND (expires_at IS NULL OR expires_at > ?)",
            (namespace, key, self.now()),
        )
        return bytes(rows[0][0]) if rows else None

    def kv_delete(self, namespace: str, key: str) -> bool:
        with self._write() as cur:
            cur.execute(
                "DELETE FROM deferq_kv WHERE namespace = ? AND key = ? "
                "AND (expires_at IS NULL OR expires_at > ?)",
                (namespace, key, self.now()),
            )
            return cur.rowcount == 1

    def kv_list(self, namespace: str) -> dict[str, bytes]:
        rows = self._read(
            "SELECT key, value FROM deferq_kv WHERE namespace = ? "
            "AND (expires_at IS NULL OR expires_at > ?)",
            (namespace, self.now()),
        )
        return {key: bytes(value) for key, value in rows}


def _state_filter(state: JobState, now: float) -> tuple[str, list[Any]]:
    if state == JobState.SCHEDULED:
        return "state = 'queued' AND run_at > ?", [now]
    if state == JobState.QUEUED:
        return "state = 'queued' AND run_at <= ?", [now]
    return "state = ?", [str(state)]


def _settle_columns(outcome: Outcome, now: float) -> tuple[str, tuple[Any, ...]]:
    """SET clause and parameters for an outcome: the one place SQLite applies outcomes."""
    if outcome.kind == "succeeded":
        result = None if outcome.result is None else dumps(outcome.result, "the task's result")
        return "state = 'succeeded', result = ?, finished_at = ?", (result, now)
    if outcome.kind == "retry":
        return "state = 'queued', run_at = ?, error = ?", (now + outcome.delay, outcome.error)
    if outcome.kind == "dead":
        return "state = 'dead', error = ?, finished_at = ?", (outcome.error, now)
    if outcome.kind == "release":
        return "state = 'queued', attempts = attempts - 1", ()
    raise ValueError(f"unknown outcome {outcome.kind!r}")
