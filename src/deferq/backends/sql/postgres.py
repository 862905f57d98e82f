"""postgresql:// (or postgres://) — jobs in the application's own PostgreSQL database.

- psycopg 3 with a psycopg_pool connection pool, in autocommit: most operations are
  one statement, so one round trip and one commit. `enqueue_many_async` runs the
  same plan on an asyncio connection.
- Claims: `FOR UPDATE SKIP LOCKED`, one statement for a whole batch (queries.sql).
- Idle workers LISTEN; an enqueue notifies when a job becomes due now and a worker
  waits (queries.sql, wake_waiters), an update through a trigger (migration 0001), at
  most once per queue and transaction.
- URL options: `schema=NAME` (tables in that schema, created if missing),
  `migrate=false` (never change the schema; fail with SchemaOutdated instead),
  `pool_size=N` (default 8). Any other option goes to libpq (sslmode=..., ...).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from base64 import b64decode
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from functools import partial
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

import orjson
import psycopg
from psycopg import sql as pgsql
from psycopg_pool import ConnectionPool

from ... import forks
from ...errors import ConfigError, StoreFull, StoreUnavailable
from ...job import FINISHED_STATES, Job, JobState, carry, dumps
from .. import fair
from ..base import STEPS, Enqueue, Outcome
from ..history import Row
from ..search import JobQuery, like_pattern
from ..urls import own_options
from .adapters import driver_connection, safe_name
from .base import TABLES, Settled, SQLBackend, one_transaction, parent_verdicts
from .plans import Plan, Reply, Step, T, drive, drive_async
from .queries import Migration
from .rows import WIDTH, job_of, new_values, stored_view

# Connection lost or refused, server shutting down or starting, or a failed-over
# database still read-only: all pass; the caller backs off and tries again.
CONNECTION_ERRORS = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    psycopg.errors.ReadOnlySqlTransaction,
)
FINISHED = {str(state) for state in FINISHED_STATES}
# The longest an idle worker waits for an enqueue's transaction to release the wait
# lock (wait_for_work) before it looks at the store and asks again.
WAIT_BLOCK = 0.05
# Refusals worth waiting out; any other FATAL at connect is a wrong URL.
TRANSIENT = ("starting up", "shutting down", "too many", "recovery", "remaining connection")

# The pool logs each broken connection it discards ("discarding broken connection: ...")
# as a warning. deferq says what happened itself (StoreUnavailable, once per outage in a
# worker), so those lines reach only a process whose logging is set up to show them:
# with a handler of its own here, Python's last-resort printing to stderr never applies.
logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())


def without_conflict_clause(sql: str) -> str:
    """An enqueue statement without its ON CONFLICT DO NOTHING (see insert_plan)."""
    clause = "\nON CONFLICT DO NOTHING\n"
    if clause not in sql:
        raise AssertionError("the enqueue statement lost its ON CONFLICT clause")
    return sql.replace(clause, "\n")


def lean(item: Enqueue) -> bool:
    """Whether `item` goes in with `enqueue_lean` (queries.sql): a plain job due a delay
    from now, whose other columns are their defaults."""
    job = item.job
    return (job.key is None and not job.run_at and job.expires_at is None and item.expires_in is None
            and job.remark is None and not job.tags and job.fair_key is None and item.vtime is None)


class PostgresBackend(SQLBackend):
    _trigrams: bool | None = None  # whether migration 0009 made the trigram index (else words)
    seq_ordered = False  # seq has no index of its own: a list of every state is merged per state
    state_literal = True  # the list and text indexes leave active jobs out (migrations 0019, 0020)
    schemes = ("postgresql", "postgres")
    dialect = "postgres"
    options_known = own_options("postgresql")

    # -- connections --------------------------------------------------------------------

    def table_names(self) -> dict[str, str]:
        schema = self.options.get("schema")
        prefix = f'"{safe_name(schema, "schema")}".' if schema else ""
        names = {name: prefix + table for name, table in TABLES.items()}
        return {**names, "notify_fn": prefix + "deferq_notify", "schema_prefix": prefix}

    def open(self) -> None:
        parts = urlsplit(self.url)
        query = urlencode(self.driver_options, quote_via=quote)  # spaces as %20, as libpq reads them
        self.conninfo = urlunsplit(("postgresql", parts.netloc, parts.path, query, ""))
        try:
            self.pool_size = int(self.options.get("pool_size", 8))
        except ValueError:
            raise ConfigError("pool_size must be a whole number") from None
        self._pid = forks.pid
        self._lock = threading.Lock()
        # Jobs without a unique key cannot conflict (their ids are new): they go in with
        # a plain INSERT, without the speculative insertion ON CONFLICT costs per row.
        for name in ("enqueue", "enqueue_one"):
            self.q[f"{name}_plain"] = without_conflict_clause(self.q[name])
        # The enqueue statements name the wake-up channel: put in at the first enqueue
        self._unbound = {name: self.q[name] for name in NOTIFYING}
        self._pools: dict[bool, ConnectionPool] = {}
        self._listener: psycopg.Connection | None = None
        self._channel: str | None = None
        self._done_listeners = threading.local()  # job.wait(): one LISTEN connection per thread
        # Claimed jobs that others wait for (the claim says so): their settle releases too.
        self._waited_for: set[str] = set()
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, psycopg.AsyncConnection] = (
            weakref.WeakKeyDictionary()
        )

    def pool(self, durable: bool = True) -> ConnectionPool:
        """The pool for durable work, or the one whose commits do not wait for the
        disk (synchronous_commit=off: for the worker's bookkeeping, see `run`)."""
        if self._pid != forks.pid:  # a forked child opens its own connections
            with self._lock:
                if self._pid != forks.pid:
                    self._pools, self._listener, self._pid = {}, None, forks.pid
        pool = self._pools.get(durable)
        if pool is None:
            with self._lock:
                pool = self._pools.get(durable)
                if pool is None:
                    pool = NewestFirstPool(
                        self.conninfo, min_size=1, max_size=self.pool_size, open=True,
                        kwargs={"autocommit": True}, timeout=10,
                        configure=None if durable else _commit_without_flush,
                        name="deferq" if durable else "deferq-worker",
                    )
                    self._pools[durable] = pool
        return pool

    def close(self) -> None:
        with self._lock:
            if self._pid == forks.pid:
                for pool in self._pools.values():
                    pool.close()
            if self._listener is not None:
                self._listener.close()
            for conn in list(self._async.values()):
                conn.pgconn.finish()  # an asyncio connection; its loop may be gone
            self._pools, self._listener = {}, None
            self._async.clear()

    def unavailable(self, exc: BaseException) -> StoreUnavailable:
        for pool in list(self._pools.values()):
            try:
                pool.check()  # drop the other connections the same failure broke
            except Exception:  # noqa: BLE001 - the pool refills by itself later
                pass
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        if isinstance(exc, psycopg.errors.DiskFull):
            return StoreFull(f"PostgreSQL is out of disk space: {lines[0]}")
        return StoreUnavailable(f"PostgreSQL is unavailable: {lines[0]}")

    @staticmethod
    def execute(cur: psycopg.Cursor, step: Step) -> Reply:
        if step.many:  # rows of edges (link_plan): one pipelined executemany
            cur.executemany(step.sql, step.params)
            return Reply((), cur.rowcount)
        cur.execute(step.sql, step.params)
        # rownumber, not description: a statement without rows either way, and no
        # Column objects built per call (~10 µs of an enqueue's client time)
        return Reply(cur.fetchall() if cur.rownumber is not None else [], cur.rowcount)

    @staticmethod
    async def execute_async(cur: psycopg.AsyncCursor, step: Step) -> Reply:
        if step.many:
            await cur.executemany(step.sql, step.params)
            return Reply((), cur.rowcount)
        await cur.execute(step.sql, step.params)
        return Reply(await cur.fetchall() if cur.rownumber is not None else [], cur.rowcount)

    def run(self, plan: Plan[T], *, atomic: bool = False, connection: Any = None, durable: bool = True) -> T:
        try:
            if connection is not None:
                with self.caller_connection(connection).cursor() as cur:
                    return drive(plan, partial(self.execute, cur))
            with self.pool(durable).connection() as conn:
                try:
                    with conn.transaction() if atomic else nullcontext(), conn.cursor() as cur:
                        return drive(plan, partial(self.execute, cur))
                except psycopg.errors.ReadOnlySqlTransaction:
                    conn.close()  # connected to a server that became a replica: reconnect
                    raise
        except CONNECTION_ERRORS as exc:
            raise self.unavailable(exc) from None

    @staticmethod
    def caller_connection(connection: Any) -> psycopg.Connection:
        conn = driver_connection(connection)
        if isinstance(conn, psycopg.AsyncConnection):
            raise ConfigError("an asyncio connection needs enqueue_async / enqueue_many_async")
        if not isinstance(conn, psycopg.Connection):
            raise ConfigError(
                f"connection= must be a psycopg 3 connection or a SQLAlchemy Connection/Session "
                f"on one, got {type(connection).__name__}"
            )
        return conn

    async def enqueue_many_async(self, items: Sequence[Enqueue], connection: Any = None) -> list[Job]:
        """The enqueue plan on an asyncio connection: the caller's, or one per event loop."""
        if not items:
            return []
        conn = driver_connection(connection) if connection is not None else None
        if conn is not None and not isinstance(conn, psycopg.AsyncConnection):
            return await asyncio.to_thread(self.enqueue_many, items, connection)
        try:
            # options.durable=False: this transaction's commit does not wait for the disk
            # (never the caller's transaction: its commit is the caller's)
            fast = conn is None and not any(item.durable for item in items)
            if conn is None:
                conn = await self.loop_connection()
            whole = connection is None and one_transaction(items)
            async with conn.transaction() if whole or fast else nullcontext(), conn.cursor() as cur:
                if fast:
                    await cur.execute("SET LOCAL synchronous_commit = off")
                return await drive_async(self.enqueue_plan(items), partial(self.execute_async, cur))
        except CONNECTION_ERRORS as exc:
            if connection is None:
                self._async.pop(asyncio.get_running_loop(), None)
            raise self.unavailable(exc) from None

    async def loop_connection(self) -> psycopg.AsyncConnection:
        loop = asyncio.get_running_loop()
        conn = self._async.get(loop)
        if conn is None or conn.closed:
            conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
            self._async[loop] = conn
        return conn

    def is_unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, psycopg.errors.UniqueViolation)

    # -- schema ---------------------------------------------------------------------------

    def applied_versions(self) -> list[int]:
        # A connection of its own, not the pool's: opening a store is where a wrong
        # database, role or option shows, and the pool would only say it timed out.
        try:
            with psycopg.connect(self.conninfo, autocommit=True) as conn:
                return [row[0] for row in conn.execute(self.q["applied_migrations"])]
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            return []
        except CONNECTION_ERRORS as exc:
            message = str(exc).strip().splitlines()[0]
            if "FATAL" in message and not any(word in message for word in TRANSIENT):
                raise ConfigError(f"PostgreSQL refused the connection: {message}") from None
            raise self.unavailable(exc) from None

    @contextmanager
    def migration_lock(self) -> Iterator[Callable[[Migration], None]]:
        schema = self.options.get("schema")
        key = [f"deferq:{schema}"]
        try:
            with self.pool().connection() as conn:
                # One migrator at a time, even across machines: the others wait here.
                conn.execute("SELECT pg_advisory_lock(hashtext(%s))", key)
                try:
                    if schema:
                        conn.execute(pgsql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                            pgsql.Identifier(schema)))
                    conn.execute(self.q["create_migrations_table"])

                    def apply(migration: Migration) -> None:
                        with conn.transaction():  # DDL is transactional here (not on MySQL)
                            conn.execute(migration.sql)
                            conn.execute(self.q["record_migration"], migration.record)

                    yield apply
                finally:
                    conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", key)
        except CONNECTION_ERRORS as exc:
            raise self.unavailable(exc) from None

    # -- producing --------------------------------------------------------------------------

    def text_condition(
        self, query: JobQuery, position: dict[str, Any]
    ) -> Plan[tuple[str, dict[str, Any], str, dict[str, Any]]]:
        """The trigram index (any substring), or without pg_trgm the word index."""
        if self._trigrams is None:
            reply = yield Step(self.q["text_index"])
            self._trigrams = bool(reply.rows[0][0])
        if self._trigrams:
            return self.q["find_text"], {"pattern": like_pattern(query.text)}, "index", {}
        return self.q["find_words"], {"text": query.text}, "words", {}

    def history_step(self, rows: Sequence[Row]) -> Step:
        columns = list(zip(*rows, strict=True))
        names = ("minutes", "queues", "tasks", "fields", "amounts")
        return Step(self.q["history_add"], dict(zip(names, map(list, columns), strict=True)))

    def insert_plan(self, items: Sequence[Enqueue], indexes: Sequence[int]) -> Plan[dict[int, Job]]:
        # The payload as the producer encoded it: text for one job, a JSON fragment
        # spliced into the batch document as it is (not decoded and encoded again).
        if self._channel is None:
            self.bind_channel((yield Step(self.q["jobs_schema"])).rows)
        one = len(indexes) == 1
        if one and lean(item := items[indexes[0]]):
            job = item.job
            reply = yield Step(self.q["enqueue_lean"], (
                job.id, job.task, self.payload(item).decode(), job.queue, job.priority, job.max_attempts,
                job.timeout, item.delay))
            now = reply.rows[0][0]
            return {indexes[0]: stored_view(item, now + item.delay, now)}
        rows: list[dict[str, Any]] = []
        for i in indexes:
            payload = self.payload(items[i])
            row = new_values(items[i].job, payload.decode() if one else orjson.Fragment(payload))
            row["delay"], row["expires_in"] = items[i].delay, items[i].expires_in  # due and expiry by {now}
            row["vtime"] = items[i].vtime
            rows.append(row)
        plain = "" if any(items[i].job.key for i in indexes) else "_plain"
        if one:
            reply = yield Step(self.q["enqueue_one" + plain], rows[0])
        else:
            reply = yield Step(self.q["enqueue" + plain], {"jobs": dumps(rows, "the arguments").decode()})
        times = {job_id: (run_at, now) for job_id, run_at, now, _woke in reply.rows}
        return {i: stored_view(items[i], *times[items[i].job.id]) for i in indexes if items[i].job.id in times}

    # -- consuming ----------------------------------------------------------------------------

    def claim_plan(
        self, queues: Sequence[str], limit: int, worker: str, lease: float, priorities: Sequence[int]
    ) -> Plan[list[Job]]:
        levels = fair.levels_of(priorities)
        params = {
            "queue": queues[0], "queues": list(queues), "limit": limit, "worker": worker,
            "lease": lease, "priorities": list(levels), "steps": STEPS,
        }
        reply = yield Step(self.q["claim" if len(queues) == 1 else "claim_queues"], params)
        found = [(job_of(row), row[WIDTH + 1], row[WIDTH + 3], row[WIDTH + 4]) for row in reply.rows]
        # jobs others wait on settle with their release (an expired one is never settled)
        self._waited_for.update(job.id for (job, *_), row in zip(found, reply.rows, strict=True)
                                if row[WIDTH + 2] and job.state == JobState.ACTIVE)
        for (job, *_), row in zip(found, reply.rows, strict=True):  # its checkpoints: none read as it runs
            carry(job, {name: b64decode(record) for name, record in row[WIDTH + 5] or ()})
        return self.claim_order(found, levels)  # the expired too, cancelled: reserve counts them

    def fenced_step(self, sql: str, params: list[dict[str, Any]]) -> Step:
        """One statement over arrays (one element per job)."""
        return Step(sql, {name: [entry[name] for entry in params] for name in params[0]})

    def kv_put_leased(self, job: Job, lease: float, namespace: str, key: str,
                      value: bytes) -> tuple[bool, bytes | None]:
        """One statement: one round trip, no transaction around it."""
        params = {"id": job.id, "worker": job.worker, "attempts": job.attempts,
                  "namespace": namespace, "key": key, "value": bytes(value)}

        def plan() -> Plan[tuple[bool, bytes | None]]:
            [(held, stored, kept)] = (yield Step(self.q["kv_put_leased"], params)).rows
            if not held or stored:
                return bool(held), None
            if kept is None:  # an insert that raced this statement won: its record, as committed
                rows = (yield Step(self.q["kv_get"], params)).rows
                kept = rows[0][0] if rows else None
            return True, None if kept is None else bytes(kept)

        return self.run(plan())

    def rows_step(self, sql: str, rows: list[dict[str, Any]]) -> Step:
        """One statement over arrays (`link`, `block` take unnest): a batch of
        100,000 members links its callback in one round trip, not 100,000."""
        return self.fenced_step(sql, rows)

    def settle_plan(self, outcomes: Sequence[Outcome]) -> Plan[list[bool]]:
        """A batch of jobs that returned nothing settles by `succeed` (succeed_plan); a batch
        with a job that others waited for when it was claimed settles and
        releases in one statement (`settle_release`); any other batch in the plain
        `settle`, which costs a plain job less (0.5 ms less per batch of 8, measured)
        and says which settled jobs were linked since (`waited_for`): their `release`
        follows. The batch goes in id order, the order in which an enqueue's
        `parent_states` scans the parents' index: a deadlock of the two is unlikely."""
        first = outcomes[0]
        fence = (first.job.worker, first.job.attempts, first.chunk_call)
        if all(o.kind == "succeeded" and o.result is None and (o.job.worker, o.job.attempts, o.chunk_call) == fence
               and o.job.id not in self._waited_for for o in outcomes):
            return (yield from self.succeed_plan(outcomes, *fence))
        params = self.settle_params(outcomes)
        in_order = sorted(params, key=lambda entry: entry["id"])
        ids = [entry["id"] for entry in params]
        if not self._waited_for.intersection(ids):
            reply = yield self.fenced_step(self.q["settle"], in_order)
            linked = {job: state for job, state, waited_for in reply.rows if waited_for and state in FINISHED}
            return Settled(self.applied(reply, params), linked)
        self._waited_for.difference_update(ids)
        return Settled((yield from self.settle_release_plan(params)), {})

    def succeed_plan(self, outcomes: Sequence[Outcome], worker: str | None, attempts: int,
                     call: str | None) -> Plan[list[bool]]:
        """The commonest batch (a chunk call's jobs, or plain jobs that returned nothing, of
        one lease holder and attempt): one array of ids (`succeed`), not twelve arrays of
        an element per job for `settle`'s CASEs to sort out."""
        params = {"ids": sorted(o.job.id for o in outcomes), "worker": worker, "attempts": attempts,
                  "chunk_call": call}
        reply = yield Step(self.q["succeed"], params)
        linked = {job: state for job, state, waited_for in reply.rows if waited_for and state in FINISHED}
        done = {row[0] for row in reply.rows}
        return Settled([o.job.id in done for o in outcomes], linked)

    def settle_release_plan(self, params: list[dict[str, Any]]) -> Plan[list[bool]]:
        """Settle and release in one statement: the verdicts of each outcome's finished
        states go along (a job whose cancel was requested ends cancelled instead of
        dead or queued). Then, in a `release` of their own: the children cancelled
        there (for their own children), and the edges of a job linked while the
        statement waited for its row (too new for its snapshot)."""
        ends = {(entry["id"], state) for entry in params
                for state in (entry["state"], str(JobState.CANCELLED)) if state in FINISHED}
        step = self.fenced_step(self.q["settle_release"], sorted(params, key=lambda entry: entry["id"]))
        reply = yield step._replace(params={**step.params, **parent_verdicts(ends, "v_")})
        later = {row[0]: row[1] for row in reply.rows if row[2] and row[1] in FINISHED}
        later.update((row[0], str(JobState.CANCELLED)) for row in reply.rows if row[3])
        if later:
            yield from self.release_plan(later)
        return self.applied(Reply([row for row in reply.rows if not row[3]]), params)

    def release_plan(self, parents: dict[str, str | None], own_transaction: bool = True) -> Plan[int]:
        """One statement (`release`) per level, a transaction by itself unless the
        caller's: no lock is held across a round trip. A child cancelled here passes
        it on to its own children in the next."""
        taken = 0
        while parents:
            rows = (yield Step(self.q["release"], parent_verdicts(parents.items()))).rows
            taken += sum(row[1] for row in rows)
            parents = {child: str(JobState.CANCELLED) for child, _, told_to_cancel in rows if told_to_cancel}
        return taken

    def applied(self, reply: Reply, params: list[dict[str, Any]]) -> list[bool]:
        """RETURNING names the entries that applied."""
        applied = {row[0] for row in reply.rows}
        return [entry["id"] in applied for entry in params]

    def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        """Sleep until a notification for one of `queues`, the next due time or `timeout`.
        The worker holds the wait lock meanwhile (queries.sql, wake_waiters: enqueues
        notify only while a worker holds it), taken before it looks at the store; taking
        it waits for an enqueue's transaction that holds it, at most WAIT_BLOCK each
        time (a longer one: the worker looks at the store, then asks again)."""
        deadline = time.monotonic() + timeout
        try:
            listener = self.listener()
            for _ in listener.notifies(timeout=0):
                pass  # older news: the look-up below sees what they announced
            waiting = self.begin_wait(listener)
            try:
                while True:
                    next_due, now = self.next_due(queues)
                    until = deadline - time.monotonic()
                    if next_due is not None:
                        until = min(until, next_due - now)
                    if until <= 0:
                        return
                    if not waiting:
                        if any(note.payload in queues for note in listener.notifies(timeout=0)):
                            return
                        waiting = self.begin_wait(listener)
                        continue  # a look at the store after each try, and after the lock
                    wake_at = time.monotonic() + until
                    for note in listener.notifies(timeout=until, stop_after=1):
                        if note.payload in queues:
                            return  # due now or soon: the claim (or the next wait) will tell
                    if time.monotonic() >= wake_at:
                        return  # the due time or the deadline: no need to ask again
            finally:
                if waiting and not listener.closed:
                    listener.execute(self.q["wait_end"])
        except CONNECTION_ERRORS as exc:
            self.drop_listener()
            raise self.unavailable(exc) from None

    def begin_wait(self, listener: psycopg.Connection) -> bool:
        """Take the wait lock (shared with other idle workers); False when an enqueue's
        transaction held it for WAIT_BLOCK."""
        try:
            listener.execute(self.q["wait_begin"], {"timeout": f"{WAIT_BLOCK * 1000:.0f}ms"})
        except psycopg.errors.LockNotAvailable:
            return False
        return True

    def listener(self) -> psycopg.Connection:
        """This process's LISTEN connection (kept apart from the pool)."""
        self.pool(durable=False)  # after a fork: forgets the parent's listener
        if self._listener is None or self._listener.closed:
            conn = psycopg.connect(self.conninfo, autocommit=True)
            channel = self._channel or self.bind_channel(conn.execute(self.q["jobs_schema"]).fetchall())
            conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)))
            self._listener = conn
        return self._listener

    def wake(self, job_id: str) -> bool:
        def plan() -> Plan[int]:
            yield from self.bound()
            return (yield Step(self.q["wake"], {"id": job_id})).rowcount

        return self.run(plan()) == 1

    def wake_many(self, job_ids: Sequence[str]) -> int:
        def plan() -> Plan[int]:
            yield from self.bound()
            return (yield Step(self.q["wake"], [{"id": job_id} for job_id in job_ids], many=True)).rowcount

        return self.run(plan(), atomic=True) if job_ids else 0

    def bound(self) -> Plan[None]:
        """The statements that wake idle workers named their channel first (a wake may be
        a process's first such statement: an event sent before any enqueue)."""
        if self._channel is None:
            self.bind_channel((yield Step(self.q["jobs_schema"])).rows)

    def bind_channel(self, rows: Sequence[Any]) -> str:
        """The channel of idle workers (from the jobs_schema query's rows), now also in the
        enqueue statements that notify it."""
        channel = f"deferq:{(rows[0][0] if rows else 'public')[:50]}"
        literal = "'" + channel.replace("'", "''") + "'"
        for name, sql in self._unbound.items():
            self.q[name] = sql.replace("{channel}", literal)
        self._channel = channel
        return channel

    def changes(self, job_id: str, timeout: float) -> bool:
        """A job finished somewhere (NOTIFY "deferq_done:<schema>", migration 0010) within
        `timeout`. Each waiting thread listens on a connection of its own, kept for its
        next wait, so a job that finishes between two looks is not missed."""
        local = self._done_listeners.__dict__
        conn: psycopg.Connection | None = local.get("conn")
        try:
            if conn is None or conn.closed or local.get("pid") != forks.pid:
                conn = psycopg.connect(self.conninfo, autocommit=True)
                schema = conn.execute("SELECT current_schema()").fetchone()
                name = self.options.get("schema") or (schema[0] if schema else "public")
                conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(f"deferq_done:{name[:45]}")))
                local.update(conn=conn, pid=forks.pid)
                return True  # listening from now on: the caller looks again at once
            return any(True for _ in conn.notifies(timeout=timeout, stop_after=1))
        except CONNECTION_ERRORS as exc:
            local.pop("conn", None)
            raise self.unavailable(exc) from None

    def drop_listener(self) -> None:
        if self._listener is not None:
            try:
                self._listener.close()
            finally:
                self._listener = None


NOTIFYING = ("enqueue", "enqueue_plain", "enqueue_one", "enqueue_one_plain", "enqueue_lean", "wake")


class _Stack(deque[Any]):
    """Idle connections, the one given back last taken first."""

    def popleft(self) -> Any:
        return self.pop()


class NewestFirstPool(ConnectionPool):
    """psycopg's pool, handing out the connection given back last (as PgBouncer does),
    where psycopg's own takes them in turn: a thread that enqueues one job after another
    keeps one server process busy and its caches warm, not two or more in rotation (a
    statement on a connection used in turn with another one costs ~57 µs more on a
    2-core machine: 278 against 221). The others stay idle, so the pool's max_idle
    closes them. Its list of idle connections is swapped for a stack: a private part
    of psycopg_pool, checked by tests/stores/test_sql_pool.py (a release that changes it makes
    this a plain pool again, never a broken one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if type(getattr(self, "_pool", None)) is deque:
            with self._lock:
                self._pool = _Stack(self._pool)


def _commit_without_flush(conn: psycopg.Connection) -> None:
    conn.execute("SET synchronous_commit = off")
