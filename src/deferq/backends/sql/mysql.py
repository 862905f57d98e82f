"""mysql:// (or mariadb://) — jobs in the application's own MySQL or MariaDB database.

- PyMySQL: pure Python, so `pip install deferq[mysql]` needs no compiler or client
  library, and it is the driver SQLAlchemy users most often already have. Its speed
  is not what limits a queue: the round trips are.
- Claims: `SELECT ... FOR UPDATE SKIP LOCKED` then one UPDATE, in one short
  transaction (MySQL 8+, MariaDB 10.6+). Older servers (found from the version, or
  forced with `?claim=update`) use the seed's "update first, then select what I own".
- No LISTEN/NOTIFY in MySQL: idle workers poll the next due time, every 5 ms while
  work keeps arriving, backing off to every 50 ms when idle (POLL_* below), and
  never past the next due time.
- Names compare exactly ('k' and 'k ' differ): the tables use a NO PAD collation
  (migration 0015, `exact_collation`), not utf8mb4_bin, which is PAD SPACE.
- URL: mysql://user:password@host:3306/database. Options: `migrate=false`,
  `pool_size=N` (idle connections kept, default 8), `claim=auto|skip_locked|update`,
  `connect_timeout=S`.
"""

from __future__ import annotations

import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any
from urllib.parse import unquote, urlsplit

import pymysql
from pymysql.constants import CLIENT, SERVER_STATUS

from ... import forks
from ...errors import ConfigError, StoreFull, StoreUnavailable
from ...job import Job, JobState, carry
from .. import fair
from ..base import Enqueue, finished_only
from ..search import JobQuery, like_pattern
from ..urls import own_options
from .adapters import driver_connection, safe_name
from .base import TABLES, SQLBackend
from .plans import Plan, Reply, Step, T, drive
from .queries import Migration, render
from .rows import WIDTH, job_of, new_values, stored_view

POLL_MIN, POLL_MAX = 0.005, 0.05  # seconds between looks while waiting for work
CONNECTION_ERRORS = (pymysql.err.OperationalError, pymysql.err.InterfaceError)
UNIQUE_VIOLATION = 1062
MAX_NAME = 255  # task and unique_key are VARCHAR(255)
SETUP_ERRORS = {1044, 1045, 1049}  # access denied to the database, bad password, no database
BUSY = {1205, 1213}  # lock wait timeout, deadlock: retried by the caller, on the same connection
# Tries of a statement that lost a deadlock (1213) or waited out innodb_lock_wait_timeout
# (1205, already a long wait): workers contending for the same rows, not an outage.
BUSY_TRIES = {1213: 5, 1205: 2}
FULL = {1021, 1114}  # disk full, table full (its tablespace cannot grow)
# NO PAD binary collations of utf8mb4, by preference: MariaDB 10.2+, MySQL 8.0.17+
# (utf8mb4_bin is PAD SPACE on both: 'k' = 'k ').
# Characters of statements sent in one packet (4 bytes each at most): a settle of many
# large results goes in several (one transaction still), never past a server's
# max_allowed_packet (4 MiB at the least, by default) into a "server has gone away" that
# every retry of the batch would meet again.
PACKET = 1024 * 1024
EXACT_COLLATIONS = ("utf8mb4_nopad_bin", "utf8mb4_0900_bin")


def exact_collation(cur: Any, candidates: tuple[str, ...] = EXACT_COLLATIONS) -> str:
    """The server's NO PAD binary collation of utf8mb4 ({exact} in the migrations), in
    which 'k' and 'k ' differ; ConfigError on a server that has none (MySQL before 8.0.17)."""
    cur.execute("SELECT COLLATION_NAME FROM information_schema.COLLATIONS WHERE COLLATION_NAME IN %s",
                (candidates,))
    found = {row[0] for row in cur.fetchall()}
    for name in candidates:
        if name in found:
            return name
    raise ConfigError("this MySQL server has no NO PAD collation, which deferq needs to tell 'k' from 'k ' "
                      "(PAD SPACE calls them equal): use MySQL 8.0.17+ or MariaDB 10.2+")


def supports_skip_locked(version: str) -> bool:
    """SKIP LOCKED arrived in MySQL 8.0.1 and MariaDB 10.6."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        return False
    release = (int(match[1]), int(match[2]))
    return release >= (10, 6) if "mariadb" in version.lower() else release >= (8, 0)


class MySQLBackend(SQLBackend):
    schemes = ("mysql", "mariadb")
    dialect = "mysql"
    options_known = own_options("mysql")

    # -- connections ------------------------------------------------------------------

    def text_condition(
        self, query: JobQuery, position: dict[str, Any]
    ) -> Plan[tuple[str, dict[str, Any], str, dict[str, Any]]]:
        """No text index: the newest `window` jobs by seq, fixed by the first page (the
        cursor carries where it starts), scanned without case."""
        reply = yield Step(self.q["seq_range"])
        low, high = reply.rows[0]
        floor = int(position["floor"]) if "floor" in position else int(high or 0) - query.window
        scanned = max(0, int(high or 0) - max(floor, int(low or 1) - 1))
        carry = {"floor": floor, "scanned": scanned, "complete": low is None or int(low) > floor}
        return self.q["find_text"], {"floor": floor, "pattern": like_pattern(query.text.lower())}, "scan", carry

    def table_names(self) -> dict[str, str]:
        parts = urlsplit(self.url)
        database = unquote(parts.path.lstrip("/"))
        if not database:
            raise ConfigError(f"the MySQL URL {self.url!r} names no database: use mysql://host/mydb")
        self.database = safe_name(database, "database")
        return {name: f"`{self.database}`.{table}" for name, table in TABLES.items()}

    def open(self) -> None:
        if self.driver_options:
            name = sorted(self.driver_options)[0]
            raise ConfigError(f"unknown option {name!r}: options are {', '.join(self.options_known)}")
        parts = urlsplit(self.url)
        try:
            self.pool_size = int(self.options.get("pool_size", 8))
            timeout = float(self.options.get("connect_timeout", 10))
        except ValueError:
            raise ConfigError("pool_size and connect_timeout must be numbers") from None
        self.connect_args: dict[str, Any] = {
            "host": parts.hostname or "127.0.0.1", "port": parts.port or 3306,
            "user": unquote(parts.username or "root"), "password": unquote(parts.password or ""),
            "database": self.database, "charset": "utf8mb4", "autocommit": True,
            "connect_timeout": timeout,
            # Row counts of UPDATE are rows matched, not rows changed: a fence that held
            # counts 1 even when the values written equal the old ones.
            # Several statements per round trip (our own connections only).
            "client_flag": CLIENT.FOUND_ROWS | CLIENT.MULTI_STATEMENTS,
            "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        }
        claim = self.options.get("claim", "auto")
        if claim not in ("auto", "skip_locked", "update"):
            raise ConfigError(f"claim={claim!r}: use auto, skip_locked or update")
        self._claim = claim
        self._idle: list[pymysql.connections.Connection] = []
        self._lock = threading.Lock()
        self._pid = forks.pid
        self._poll = POLL_MIN

    def detect_claim(self) -> None:
        """claim=auto: SKIP LOCKED if the server has it (asked once, outside any plan)."""
        if self._claim == "auto":

            def plan() -> Plan[str]:
                reply = yield Step("SELECT VERSION()")
                return str(reply.rows[0][0])

            self._claim = "skip_locked" if supports_skip_locked(self.run(plan())) else "update"

    @contextmanager
    def connection(self) -> Iterator[pymysql.connections.Connection]:
        """A pooled connection; one that failed is closed, and so are the idle ones
        (a server restart or KILL broke them too)."""
        with self._lock:
            if self._pid != forks.pid:  # forked: the parent's sockets are not ours
                self._idle, self._pid = [], forks.pid
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = pymysql.connect(**self.connect_args)
        try:
            yield conn
        except BaseException as exc:
            broken = isinstance(exc, CONNECTION_ERRORS) and _code(exc) not in BUSY
            if broken or not conn.open:
                self._discard(conn)
            else:
                self._give_back(conn)  # a deadlock or lock timeout: the connection is fine
            raise
        else:
            self._give_back(conn)

    def _give_back(self, conn: pymysql.connections.Connection) -> None:
        with self._lock:
            if len(self._idle) < self.pool_size:
                self._idle.append(conn)
                return
        conn.close()

    def _discard(self, conn: pymysql.connections.Connection) -> None:
        with self._lock:
            doomed, self._idle = [conn, *self._idle], []
        for each in doomed:
            try:
                each.close()
            except Exception:  # noqa: BLE001 - already broken
                pass

    def close(self) -> None:
        with self._lock:
            doomed, self._idle = self._idle, []
        for conn in doomed:
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass

    @staticmethod
    def execute(cur: Any, step: Step) -> Reply:
        if not (step.many or step.begin or step.commit):
            cur.execute(step.sql, step.params)
            return Reply(list(cur.fetchall()) if cur.description else [], cur.rowcount)
        if step.batch and not (step.begin or step.commit):
            cur.executemany(step.sql, step.params)  # an INSERT: one multi-row INSERT
            return Reply([], cur.rowcount)
        # Several statements in one round trip (our connections allow it), read back
        # result by result, with the transaction's BEGIN / COMMIT in the same packet.
        runs = step.params if step.many else [step.params]
        statements = [cur.mogrify(step.sql, params) for params in runs]
        statements = ["BEGIN"] * step.begin + statements + ["COMMIT"] * step.commit
        rows: list[tuple[Any, ...]] = []
        counts = []
        for packet in packets(statements):
            cur.execute(packet)
            while True:
                if cur.description:
                    rows += cur.fetchall()
                counts.append(cur.rowcount)
                if not cur.nextset():
                    break
        counts = counts[int(step.begin) : len(counts) - int(step.commit)]
        return Reply(rows, sum(counts), counts)

    def execute_busy(self, conn: pymysql.connections.Connection, cur: Any, step: Step) -> Reply:
        """`execute`, trying a step again (a few times, after a short random pause) when
        it lost a deadlock or a lock wait, if it starts its own transaction or runs
        outside one: the rollback then undid nothing of the plan's earlier steps."""
        status = getattr(conn, "server_status", 0)  # PyMySQL's; missing from its stubs
        restartable = not status & SERVER_STATUS.SERVER_STATUS_IN_TRANS
        tries = 0
        while True:
            try:
                return self.execute(cur, step)
            except pymysql.err.OperationalError as exc:
                tries += 1
                if not restartable or tries >= BUSY_TRIES.get(_code(exc) or 0, 1):
                    raise
                conn.rollback()  # a lock wait timeout leaves the transaction open
                time.sleep(random.uniform(0.005, 0.01) * 2**tries)

    def run(self, plan: Plan[T], *, atomic: bool = False, connection: Any = None, durable: bool = True) -> T:
        # `durable` is ignored: MySQL sets commit flushing per server
        # (innodb_flush_log_at_trx_commit), not per session.
        try:
            if connection is not None:
                with self.caller_connection(connection).cursor() as cur:
                    return drive(plan, partial(self.execute, cur))
            with self.connection() as conn, conn.cursor() as cur:
                try:
                    if atomic:
                        conn.begin()
                    result = drive(plan, partial(self.execute_busy, conn, cur))
                    if atomic:
                        conn.commit()
                    return result
                finally:
                    status = getattr(conn, "server_status", 0)  # PyMySQL's; missing from its stubs
                    if conn.open and status & SERVER_STATUS.SERVER_STATUS_IN_TRANS:
                        conn.rollback()  # a plan stopped short of its COMMIT
        except CONNECTION_ERRORS as exc:
            raise self.unavailable(exc) from None

    def unavailable(self, exc: BaseException) -> Exception:
        code = _code(exc)
        message = str(exc.args[-1] if exc.args else exc).strip().splitlines()[0]
        if code in SETUP_ERRORS:  # retrying will not help: say what to fix
            return ConfigError(f"cannot use the MySQL database {self.database!r}: {message}")
        if code in FULL:
            return StoreFull(f"MySQL is out of space: {message}")
        return StoreUnavailable(f"MySQL is unreachable or busy: {message}")

    @staticmethod
    def caller_connection(connection: Any) -> pymysql.connections.Connection:
        conn = driver_connection(connection)
        if not isinstance(conn, pymysql.connections.Connection):
            raise ConfigError(
                f"connection= must be a PyMySQL connection or a SQLAlchemy Connection/Session "
                f"on one, got {type(connection).__name__}"
            )
        return conn

    def is_unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, pymysql.err.IntegrityError) and exc.args[0] == UNIQUE_VIOLATION

    # -- schema ---------------------------------------------------------------------------

    def applied_versions(self) -> list[int]:
        def plan() -> Plan[list[int]]:
            reply = yield Step(self.q["applied_migrations"])
            return [row[0] for row in reply.rows]

        try:
            return self.run(plan())
        except pymysql.err.ProgrammingError:  # no such table yet
            return []

    @contextmanager
    def migration_lock(self) -> Iterator[Callable[[Migration], None]]:
        lock = (f"deferq:{self.database}",)
        try:
            with self.connection() as conn, conn.cursor() as cur:
                # One migrator at a time: the others wait here (up to 60 s).
                cur.execute("SELECT GET_LOCK(%s, 60)", lock)
                try:
                    cur.execute(self.q["create_migrations_table"])
                    server_names = {"exact": exact_collation(cur)}

                    def apply(migration: Migration) -> None:
                        # DDL commits by itself in MySQL: each statement stands alone,
                        # and the migration is recorded after its last one.
                        for statement in migration.statements:
                            cur.execute(render(statement, server_names))
                        cur.execute(self.q["record_migration"], migration.record)

                    yield apply
                finally:
                    cur.execute("SELECT RELEASE_LOCK(%s)", lock)
        except CONNECTION_ERRORS as exc:
            raise self.unavailable(exc) from None

    # -- producing ----------------------------------------------------------------------------

    def insert_plan(self, items: Sequence[Enqueue], indexes: Sequence[int]) -> Plan[dict[int, Job]]:
        reply = yield Step(self.q["clock"])
        now = float(reply.rows[0][0])
        rows, views = [], {}
        for i in indexes:
            job = items[i].job
            _check_lengths(job)
            run_at = job.run_at or now + items[i].delay
            views[i] = stored_view(items[i], run_at, now)
            row = new_values(job, self.payload(items[i]).decode())
            row["run_at"], row["created_at"], row["expires_at"] = run_at, now, views[i].expires_at
            row["vtime"] = items[i].vtime
            rows.append(row)
        yield Step(self.q["enqueue"], rows, many=True, batch=True)
        if not any(items[i].job.key for i in indexes):
            return views  # without keys nothing can have been skipped
        # Row counts cannot tell (a caller's connection may count found rows): ask.
        reply = yield Step(self.q["stored_ids"], {"ids": tuple(views[i].id for i in indexes)})
        present = {row[0] for row in reply.rows}
        return {i: view for i, view in views.items() if view.id in present}

    # -- consuming ------------------------------------------------------------------------------

    def purge(self, states: Iterable[JobState], older_than: float = 0.0) -> int:
        """Deletes only when a plain read finds something to delete: the upkeep leader purges
        every minute, mostly finding nothing, and a DELETE that finds nothing still
        locks (and can deadlock with settles)."""
        wanted = finished_only(states)
        if not wanted:
            return 0
        params = {"states": [str(s) for s in wanted], "older_than": older_than}
        if not self.run(self._count(self.q["purgeable"], params), durable=False):
            return 0
        return super().purge(wanted, older_than)

    def reserve(
        self, queues: Sequence[str], limit: int, worker: str, lease: float, priorities: Sequence[int]
    ) -> list[Job]:
        self.detect_claim()
        jobs = super().reserve(queues, limit, worker, lease, priorities)
        if jobs:
            self._poll = POLL_MIN  # busy: look again soon when it runs dry
        return jobs

    def in_param(self, values: Sequence[str]) -> Any:
        return tuple(values)

    def claim_plan(
        self, queues: Sequence[str], limit: int, worker: str, lease: float, priorities: Sequence[int]
    ) -> Plan[list[Job]]:
        if self._claim == "update":
            return (yield from self.claim_update_plan(queues, limit, worker, lease, priorities))
        return (yield from self.claim_skip_locked_plan(queues, limit, worker, lease, priorities))

    def claim_skip_locked_plan(
        self, queues: Sequence[str], limit: int, worker: str, lease: float, priorities: Sequence[int]
    ) -> Plan[list[Job]]:
        """SKIP LOCKED: every (level, queue) range in one round trip, each read in index
        order; the best `limit` rows are leased. The others were locked for a moment
        only (until this transaction ends, a round trip later)."""
        levels = fair.levels_of(priorities)
        ranges = [  # each priority's plain and fair levels in one statement
            {"queue": queue, "priority": level, "limit": limit} for level in levels if level < fair.FAIR
            for queue in queues
        ]
        reply = yield Step(self.q["claim"], ranges, many=True, begin=True)
        found = [(job_of(row), row[WIDTH + 1], row[WIDTH + 2], row[WIDTH + 3]) for row in reply.rows]
        chosen = self.claim_order(list(found), levels)[:limit]
        if not chosen:
            yield Step("COMMIT")
            return []
        seq_of = {job.id: seq for job, seq, *_ in found}
        now = reply.rows[0][WIDTH]
        expired = [job for job in chosen if job.expires_at is not None and job.expires_at <= now]
        if expired:  # never run: cancelled instead, in the same transaction (reserve counts them)
            chosen = [job for job in chosen if job not in expired]
            yield Step(self.q["expire"], {"now": now, "seqs": tuple(seq_of[job.id] for job in expired)},
                       commit=not chosen)
            expired = [job.with_state(JobState.CANCELLED, error="expired", finished_at=now, updated_at=now)
                       for job in expired]
            if not chosen:
                return expired
        lease_until = now + lease
        yield Step(self.q["lease"], {
            "worker": worker, "lease_until": lease_until, "now": now,
            "seqs": tuple(seq_of[job.id] for job in chosen),
        }, commit=True)
        leased = [
            job.with_state(JobState.ACTIVE, attempts=job.attempts + 1, worker=worker, lease_until=lease_until,
                           last_worker=worker, updated_at=now)
            for job in chosen
        ]
        for job, was in zip(leased, chosen, strict=True):
            if was.last_worker is None:  # never leased before: no checkpoints to read (with_checkpoints)
                carry(job, {})
        return leased + expired

    def claim_update_plan(
        self, queues: Sequence[str], limit: int, worker: str, lease: float, priorities: Sequence[int]
    ) -> Plan[list[Job]]:
        """Update first (each statement commits by itself), then select what I own."""
        token = uuid.uuid4().hex
        taken = 0
        levels = fair.levels_of(priorities)
        for level in levels:
            if taken >= limit:
                break
            params = {
                "worker": worker, "lease": lease, "token": token, "queues": tuple(queues),
                "priority": level, "limit": limit - taken,
            }
            sql = self.q["claim_update_fair" if level >= fair.FAIR else "claim_update"]
            taken += (yield Step(sql, params)).rowcount
        if not taken:
            return []
        reply = yield Step(self.q["claimed"], {"token": token})
        found = [(job_of(row), row[WIDTH + 1], row[WIDTH + 2], row[WIDTH + 3]) for row in reply.rows]
        if any(level >= fair.FAIR for _, _, level, _ in found):
            yield Step(self.q["claimed_leave_fair"], {"token": token})
        return self.claim_order(found, levels)

    def recover_plan(self) -> Plan[list[tuple[str, str, str]]]:
        """No RETURNING on an UPDATE: the expired leases are read and locked first, then
        taken back, in one transaction."""
        reply = yield Step(self.q["expired_leases"], begin=True)
        if not reply.rows:
            yield Step("COMMIT")
            return []
        yield Step(self.q["recover_expired"], {"seqs": tuple(row[0] for row in reply.rows)}, commit=True)
        return [(str(queue), str(task), str(state)) for _, queue, task, state in reply.rows]

    def heartbeat_plan(self, params: list[dict[str, Any]]) -> Plan[dict[str, bool]]:
        """No RETURNING: the row counts say which leases held, then one look-up which of
        those someone asked to stop."""
        reply = yield self.fenced_step(self.q["heartbeat"], params)
        held = [entry["id"] for entry, count in zip(params, reply.counts, strict=True) if count == 1]
        if not held:
            return {}
        asked = {row[0] for row in (yield Step(self.q["cancels_requested"], {"ids": tuple(held)})).rows}
        return {job_id: job_id in asked for job_id in held}

    def _next_due_plan(self, queues: Sequence[str]) -> Plan[tuple[float | None, float]]:
        """One row per queue, all queues in one round trip."""
        if not queues:
            return None, float((yield Step(self.q["clock"])).rows[0][0])
        reply = yield Step(self.q["next_due"], [{"queue": queue} for queue in queues], many=True)
        due = [float(d) for *levels, _ in reply.rows for d in levels if d is not None]
        return (min(due) if due else None), float(reply.rows[-1][-1])

    def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        """Poll the next due time: soon while busy, slower while idle (POLL_MIN..MAX)."""
        deadline = time.monotonic() + timeout
        while True:
            next_due, now = self.next_due(queues)
            if next_due is not None and next_due <= now:
                self._poll = POLL_MIN
                return
            pause = min(self._poll, deadline - time.monotonic())
            if next_due is not None:
                pause = min(pause, next_due - now)
            if pause <= 0:
                return
            time.sleep(pause)
            self._poll = min(self._poll * 2, POLL_MAX)


def _code(exc: BaseException) -> int | None:
    """The MySQL error number of a PyMySQL error."""
    return exc.args[0] if exc.args and isinstance(exc.args[0], int) else None


def _check_lengths(job: Job) -> None:
    """The VARCHAR columns' limits, said before MySQL says "Data too long"."""
    for what, value in (("task name", job.task), ("unique key", job.key)):
        if value is not None and len(value) > MAX_NAME:
            raise ConfigError(f"the {what} {value[:40]!r}... is longer than {MAX_NAME} characters")


def packets(statements: list[str]) -> Iterator[str]:
    """The statements joined, in packets of PACKET characters at most (one statement
    longer than that goes alone)."""
    packet: list[str] = []
    size = 0
    for statement in statements:
        if packet and size + len(statement) > PACKET:
            yield ";\n".join(packet)
            packet, size = [], 0
        packet.append(statement)
        size += len(statement) + 2
    if packet:
        yield ";\n".join(packet)
