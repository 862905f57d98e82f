"""sqlite:///path — the embedded default: one file, safe for many processes.

The operations are SQLBackend's, over the named queries of `sqlite/queries.sql`;
what is SQLite's own is here:
- One connection per thread, in WAL mode, so readers never block the writer. Every
  transaction that writes starts with BEGIN IMMEDIATE (a read that later upgrades to
  a write can deadlock into SQLITE_BUSY), with a busy timeout; a single statement
  needs none (it takes the write lock before it reads).
- The clock is this machine's: SQLite is embedded, so every process that opens the
  file shares one clock. It is bound into each statement as :now.
- Claims probe each queue x priority range of the waiting index, then lease the best
  rows, in one transaction (`claim_plan`).
- Idle workers watch `PRAGMA data_version` (a read of shared memory, no I/O): every
  2 ms right after activity, stretching to every 25 ms as the quiet lasts, so a new
  job is picked up in milliseconds without a server to push notifications.
- `synchronous=NORMAL` by default: a process crash loses nothing; a power cut may lose
  the last transactions. Add `?synchronous=full` to the URL to fsync every commit.
- sqlite3's errors become deferq's at this boundary: a file that cannot be opened,
  read or written (or stays locked past the busy timeout) raises StoreUnavailable, a
  full disk StoreFull.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from ...errors import ConfigError, StoreFull, StoreUnavailable
from ...job import Job, carry, dumps
from .. import fair
from ..base import Backend, Enqueue, Outcome
from ..history import Row
from ..search import JobQuery
from ..urls import own_options
from .base import TABLES, UNCOUNTED, Settled, SQLBackend
from .plans import Plan, Reply, Step, T, drive
from .queries import Migration
from .rows import job_of, new_row
from .search import TextCondition

POLL_MIN, POLL_MAX = 0.002, 0.025  # seconds between data_version polls of an idle worker
BUSY_TIMEOUT = 30.0  # seconds a writer waits for the write lock before giving up
# Primary result codes of a file that cannot be opened, read or written right now.
UNAVAILABLE = {
    sqlite3.SQLITE_PERM, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_READONLY,
    sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_NOTADB,
}


TEXT_BATCH = 2000  # rows indexed per write transaction (sqlite.py text index)
MAINTENANCE_INDEXES = 5  # batches the upkeep leader's recovery sweep indexes, at most
SEARCH_INDEXES = 10  # batches a text search indexes first, at most


class SQLiteBackend(SQLBackend):
    schemes = ("sqlite",)
    kv_put_within = Backend.kv_put_within  # refused: no caller's transaction to write in
    dialect = "sqlite"
    options_known = own_options("sqlite")
    settles_steps = True  # one write transaction fewer a batch: writers queue for the one lock

    # -- connections ------------------------------------------------------------------

    def table_names(self) -> dict[str, str]:
        return {
            **TABLES,
            "jobs_fts": "deferq_jobs_fts",
            "jobs_fts_pending": "deferq_jobs_fts_pending",
            "now": ":now",
        }

    def open(self) -> None:
        rest = self.url.split("://", 1)[1].split("?", 1)[0]
        self.path = rest[1:] if rest.startswith("/") else rest  # sqlite:///rel, sqlite:////abs
        if not self.path:
            raise ConfigError(f"the SQLite URL {self.url!r} names no file: use sqlite:///deferq.db")
        if self.driver_options:
            name = sorted(self.driver_options)[0]
            raise ConfigError(f"unknown option {name!r}: options are {', '.join(self.options_known)}")
        self.synchronous = self.options.get("synchronous", "normal").upper()
        if self.synchronous not in ("OFF", "NORMAL", "FULL"):
            raise ConfigError(f"synchronous={self.synchronous.lower()} must be off, normal or full")
        self._local = threading.local()
        self._all: dict[threading.Thread, sqlite3.Connection] = {}  # each thread's connection
        self._lock = threading.Lock()
        self._poll = POLL_MIN

    def connection(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
        except (sqlite3.Error, OSError) as exc:
            error = self.store_error(exc) if isinstance(exc, sqlite3.Error) else None
            if isinstance(error, StoreFull):
                raise error from None
            raise StoreUnavailable(f"cannot open the SQLite database {self.path!r}: {exc}") from None
        with self._lock:
            # a thread that ended (a worker's progress writer ends when idle and starts
            # again) leaves its connection behind: close those, or each start leaks one
            for thread in [t for t in self._all if not t.is_alive()]:
                self._all.pop(thread).close()
            self._all[threading.current_thread()] = conn
        self._local.execute = partial(self.execute, conn)  # made once: run() is every operation's path
        self._local.conn = conn
        return conn

    def store_error(self, exc: sqlite3.Error) -> StoreUnavailable | None:
        """deferq's error for a store that cannot be used now; None for the others
        (a unique key held, a bug), which pass unchanged."""
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF  # the primary result code
        if code == sqlite3.SQLITE_FULL or "disk is full" in str(exc):
            return StoreFull(f"SQLite {self.path!r} is out of space ({exc}): free some disk space")
        if code in UNAVAILABLE:
            return StoreUnavailable(f"SQLite {self.path!r}: {exc}")
        return None

    def close(self) -> None:
        with self._lock:
            for conn in self._all.values():
                conn.close()
            self._all.clear()
        self._local = threading.local()

    @staticmethod
    def execute(conn: sqlite3.Connection, step: Step) -> Reply:
        if step.begin and not conn.in_transaction:
            conn.execute("BEGIN IMMEDIATE")
        if not step.many:
            params = step.params if type(step.params) is tuple else _bind(step.sql, step.params)
            cur = conn.execute(step.sql, params)
            reply = Reply(cur.fetchall(), cur.rowcount)
        else:
            runs = step.params
            if ":now" in step.sql:  # one instant for all runs (the plan may have chosen it)
                now = time.time()
                runs = [params if "now" in params else {**params, "now": now} for params in runs]
            if step.batch:  # one prepared statement for all: only the total count
                reply = Reply((), conn.executemany(step.sql, runs).rowcount)
            else:
                rows: list[tuple[Any, ...]] = []
                counts = []
                for params in runs:
                    cur = conn.execute(step.sql, params)
                    rows += cur.fetchall()
                    counts.append(cur.rowcount)
                reply = Reply(rows, sum(counts), counts)
        if step.commit:
            conn.execute("COMMIT")
        return reply

    def state_condition(self, state: str, query: JobQuery) -> str:
        """The list indexes leave active jobs out (migration 0017), and the planner takes a
        partial index only for a query that states the index's condition word for word:
        `state <> 'active'` for the list indexes; active jobs (few) are read through
        deferq_jobs_leased, newest first. A chunk call's jobs are read through their own
        index (`+state`: not through the state's, which would read every job of the state)."""
        if query.chunk is not None:
            return f"+state = '{state}'"
        if state == "active":
            return f"state = 'active' AND seq IN (SELECT seq FROM {self.names['jobs']} WHERE state = 'active')"
        return f"state = '{state}' AND state <> 'active'"

    def text_condition(self, query: JobQuery, position: dict[str, Any]) -> TextCondition:
        """The FTS5 trigram index (the text as one FTS5 string), brought up to date first;
        if rows changed faster than a search may index them, the page says it is not
        complete (the newest changes are not searched yet)."""
        done = yield from self.index_text_plan(SEARCH_INDEXES)
        carry = {"complete": done}
        return self.q["find_text"], {"text": '"' + query.text.replace('"', '""') + '"'}, "index", carry

    def index_text_plan(self, batches: int) -> Plan[bool]:
        """Index up to `batches` batches of changed rows; whether none are left."""
        for _ in range(batches):
            params = {"batch": TEXT_BATCH}
            yield Step(self.q["text_unindex"], params, begin=True)
            yield Step(self.q["text_index"], params)
            reply = yield Step(self.q["text_indexed"], params, commit=True)
            if reply.rowcount < TEXT_BATCH:
                return True
        reply = yield Step(self.q["text_pending"])
        return not reply.rows[0][0]

    def recover_expired(self) -> int:
        """Also the text index's upkeep: the upkeep leader indexes what changed since (a few
        batches a time, off the hot path)."""
        count = super().recover_expired()
        self.run(self.index_text_plan(MAINTENANCE_INDEXES), durable=False)
        return count

    def history_step(self, rows: Sequence[Row]) -> Step:
        """One prepared statement in one transaction (not one commit per row)."""
        return super().history_step(rows)._replace(begin=True, commit=True)

    def run(self, plan: Plan[T], *, atomic: bool = False, connection: Any = None, durable: bool = True) -> T:
        # `durable` is ignored: commit flushing is the connection's (?synchronous=).
        if connection is not None:
            self.refuse_connection(connection)
        conn = getattr(self._local, "conn", None) or self.connection()
        outer = conn.in_transaction
        try:
            begin = atomic and not outer
            if begin:
                conn.execute("BEGIN IMMEDIATE")
            result = drive(plan, self._local.execute)
            if begin:
                conn.execute("COMMIT")
            return result
        except sqlite3.Error as exc:
            raise self.store_error(exc) or exc from None
        finally:
            if conn.in_transaction and not outer:  # a plan stopped short of its COMMIT
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # the error that got us here says what went wrong

    local_clock = True  # now() is this machine's clock: no round trip

    def now(self) -> float:
        return time.time()

    def describe(self) -> dict[str, Any]:
        size = None
        if self.path != ":memory:":
            size = sum(os.path.getsize(p) for p in (self.path, self.path + "-wal") if os.path.exists(p))
        return {"version": f"SQLite {sqlite3.sqlite_version}", "size_bytes": size}

    def is_unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError)

    # -- schema -------------------------------------------------------------------------

    def applied_versions(self) -> list[int]:
        def plan() -> Plan[list[int]]:
            if not (yield Step(self.q["migrations_table"])).rows[0][0]:
                return []
            return [row[0] for row in (yield Step(self.q["applied_migrations"])).rows]

        return self.run(plan())

    @contextmanager
    def migration_lock(self) -> Iterator[Callable[[Migration], None]]:
        def apply(migration: Migration) -> None:
            def plan() -> Plan[None]:
                for statement in migration.statements:
                    yield Step(statement)
                yield Step(self.q["record_migration"], migration.record)

            self.run(plan())

        # BEGIN IMMEDIATE is the lock: one migrator at a time, the others wait for it.
        # DDL is transactional here: the migrations and their records commit together
        # (`with conn` commits, or rolls back on an error).
        conn = self.connection()
        try:
            with conn:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(self.q["create_migrations_table"])
                yield apply
        except sqlite3.Error as exc:
            raise self.store_error(exc) or exc from None

    # -- producing ------------------------------------------------------------------------

    def enqueue_many(self, items: Sequence[Enqueue], connection: Any = None) -> list[Job]:
        self.refuse_connection(connection)
        if len(items) == 1 and items[0].job.key is None and not items[0].after and items[0].job.fair_key is None:
            # The commonest call: one INSERT, a transaction by itself (no BEGIN/COMMIT),
            # and with no key nothing to resolve (nor a virtual time to give).
            return list(self.run(self.insert_plan(items, (0,))).values())
        return self.run(self.enqueue_plan(items), atomic=True) if items else []

    def insert_plan(self, items: Sequence[Enqueue], indexes: Sequence[int]) -> Plan[dict[int, Job]]:
        now = self.now()
        jobs, rows, keyed, payload = {}, [], False, self.payload
        for i in indexes:  # one loop, no comprehensions: this is the single enqueue's path
            item = items[i]
            job = jobs[i] = item.stored(now)
            keyed = keyed or job.key is not None
            rows.append((*new_row(job, item.payload or payload(item)), item.vtime))
        if len(rows) == 1 and not keyed:  # one row: execute, cheaper than executemany of one
            yield Step(self.q["enqueue"], rows[0])
            return jobs
        reply = yield Step(self.q["enqueue"], rows, many=True, batch=not keyed)
        if not keyed:
            return jobs  # without keys none is skipped
        return {i: job for (i, job), count in zip(jobs.items(), reply.counts, strict=True) if count == 1}

    # -- consuming ------------------------------------------------------------------------

    def claim_plan(
        self, queues: Sequence[str], limit: int, worker: str, lease: float, priorities: Sequence[int]
    ) -> Plan[list[Job]]:
        if not priorities:
            return []
        now = self.now()
        chosen: list[int] = []
        fresh: set[int] = set()  # never leased before: no checkpoints to read (with_checkpoints)
        for level, priority in enumerate(fair.levels_of(priorities)):  # the first probe begins the transaction
            want = limit - len(chosen)
            if want <= 0:
                break
            probes = [(queue, priority, now, want) for queue in queues]
            sql = self.q["claim_fair" if priority >= fair.FAIR else "claim"]
            reply = yield Step(sql, probes, many=True, begin=level == 0)
            for _, seq, new in sorted(reply.rows)[:want]:
                chosen.append(seq)
                if new:
                    fresh.add(seq)
        if not chosen:
            yield Step("COMMIT")
            return []
        params = {"worker": worker, "lease": lease, "now": now, "seqs": chosen}
        reply = yield Step(self.q["lease"], params, commit=True)
        order = {seq: i for i, seq in enumerate(chosen)}
        rows = sorted(reply.rows, key=lambda row: order[row[-1]])
        jobs = [job_of(row) for row in rows]  # the expired too, cancelled: reserve counts them
        for job, row in zip(jobs, rows, strict=True):
            if row[-1] in fresh:
                carry(job, {})
        return jobs

    def settle_plan(self, outcomes: Sequence[Outcome]) -> Plan[list[bool]]:
        """The outcomes, then the release of the settled jobs' edges (most have none:
        one probe of the deps index each, none at all while no job waits for another), in
        one write transaction: no second transaction, and no gap for a crash."""
        applied = yield from self.settled_plan(outcomes)
        finished = [o.job.id for o, ok in zip(outcomes, applied, strict=True) if ok and o.kind not in UNCOUNTED]
        if finished and (yield Step(self.q["any_edges"])).rows[0][0]:
            yield from self.release_plan(dict.fromkeys(finished), own_transaction=False)
        yield from self.steps_expiry_plan(outcomes, applied)
        yield Step("COMMIT")
        return Settled(applied, {})  # released

    def settled_plan(self, outcomes: Sequence[Outcome]) -> Plan[list[bool]]:
        """The outcomes applied, in a write transaction left open."""
        if all(o.kind == "succeeded" and o.result is None for o in outcomes):
            # The hot path, jobs that returned nothing: one statement per lease holder,
            # attempt and chunk call (most batches: one). If every lease held, the row
            # counts say so; else undo it and go one by one (the write lock is kept).
            now = self.now()
            fences: dict[tuple[str | None, int, str | None], list[str]] = {}
            for o in outcomes:
                fences.setdefault((o.job.worker, o.job.attempts, o.chunk_call), []).append(o.job.id)
            yield Step("SAVEPOINT batch", begin=True)
            count = 0
            for (worker, attempts, call), ids in fences.items():
                reply = yield Step(self.q["succeed"], (now, dumps(ids).decode(), worker, attempts, call))
                count += reply.rowcount
            if count == len(outcomes):
                yield Step("RELEASE batch")
                return [True] * len(outcomes)
            yield Step("ROLLBACK TO batch")
            yield Step("RELEASE batch")
        reply = yield Step(self.q["settle"], self.settle_params(outcomes), many=True, begin=True)
        return [count == 1 for count in reply.counts]

    def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        deadline = time.time() + timeout
        next_due, _ = self.next_due(queues)
        if next_due is not None:
            deadline = min(deadline, next_due)
        version = self.data_version()
        while (left := deadline - time.time()) > 0:
            # poll fast right after activity, slower as the quiet lasts: idle costs
            # well under 1% of a core, a new job waits a few ms
            self._poll = min(self._poll * 1.5, POLL_MAX)
            time.sleep(min(self._poll, left))
            if self.data_version() != version:
                self._poll = POLL_MIN
                return

    def changes(self, job_id: str, timeout: float) -> bool:
        """Another connection committed (the data version moved) within `timeout`."""
        deadline = time.time() + timeout
        version, poll = self.data_version(), POLL_MIN
        while (left := deadline - time.time()) > 0:
            time.sleep(min(poll, left))
            poll = min(poll * 1.5, POLL_MAX)
            if self.data_version() != version:
                return True
        return False

    def data_version(self) -> int:
        """Changes whenever another connection commits. Read straight from the connection,
        not through a plan: an idle worker asks every few ms, and the time each look
        takes delays every later one."""
        try:
            return int(self.connection().execute(self.q["data_version"]).fetchone()[0])
        except sqlite3.Error as exc:
            raise self.store_error(exc) or exc from None


def _bind(sql: str, params: Any) -> Any:
    """One statement's parameters as sqlite3 takes them: lists as JSON arrays (for
    json_each), and the clock as :now unless the plan chose the instant."""
    if not params:
        return {"now": time.time()} if ":now" in sql else ()
    bound = {k: dumps(v).decode() if isinstance(v, list) else v for k, v in params.items()}
    if ":now" in sql and "now" not in bound:
        bound["now"] = time.time()
    return bound
