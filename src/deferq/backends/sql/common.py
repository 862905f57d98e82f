"""What the PostgreSQL and MySQL backends share: every contract operation, once.

Each operation is a *plan*: a generator that yields statements (`Step`) and receives
their replies (`Reply`), and returns the operation's answer. A plan does no I/O, so
one plan serves a sync driver and an async one (PostgreSQL's `enqueue_many_async`),
on a pooled connection or on the caller's own (transactional enqueue). The SQL text
comes from the database's `queries.sql` by name; a subclass supplies connections,
the plans whose statements differ in shape (enqueue, claim), and migrations.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, ClassVar, TypeVar
from urllib.parse import parse_qsl, urlsplit

from ...errors import ConfigError, SchemaOutdated
from ...job import FINISHED_STATES, Job, JobState, dumps
from ..base import Backend, Enqueue, Outcome, QueueStats, finished_only, state_for_waiting
from ..rows import job_from_row  # SQLite keeps the same columns: one decoder for all three
from .queries import Migration, load_migrations, load_queries

T = TypeVar("T")
log = logging.getLogger("deferq.sql")

#: The tables, named once. Dialects qualify them (schema / database) with `table_names`.
TABLES = {"jobs": "deferq_jobs", "kv": "deferq_kv", "migrations": "deferq_migrations"}
PURGE_BATCH = 5000  # rows per purge transaction
KEY_RETRIES = 5  # a key freed between our insert and our look-up: try the insert again
STORED_STATE = {"succeeded": "succeeded", "retry": "queued", "dead": "dead", "release": "queued"}
SAFE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")



@dataclass(frozen=True, slots=True)
class Step:
    """One statement of a plan. With `many`, `params` is a list: one run per entry
    (the reply counts rows per entry, and lists their result rows in entry order).
    `begin` / `commit` open / close a transaction around it, in the same round trip
    (MySQL; PostgreSQL plans are single statements, atomic by themselves)."""

    sql: str
    params: Any = None
    many: bool = False
    begin: bool = False
    commit: bool = False


@dataclass(slots=True)
class Reply:
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    rowcount: int = 0
    counts: list[int] = field(default_factory=list)  # per entry, for `many`


Plan = Generator[Step, Reply, T]


def drive(plan: Plan[T], execute: Callable[[Step], Reply]) -> T:
    """Run a plan with a sync executor."""
    reply: Reply | None = None
    while True:
        try:
            step = plan.send(reply)  # type: ignore[arg-type]
        except StopIteration as done:
            return done.value
        reply = execute(step)


async def drive_async(plan: Plan[T], execute: Callable[[Step], Awaitable[Reply]]) -> T:
    """Run a plan with an async executor."""
    reply: Reply | None = None
    while True:
        try:
            step = plan.send(reply)  # type: ignore[arg-type]
        except StopIteration as done:
            return done.value
        reply = await execute(step)


def url_options(url: str, given: dict[str, Any], known: Iterable[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Split the URL's `?name=value` options (overridden by keyword options) into
    deferq's own (`known`) and the rest, which the dialect may pass to its driver."""
    options = dict(parse_qsl(urlsplit(url).query))
    options.update({k: str(v) for k, v in given.items() if v is not None})
    own = {k: v for k, v in options.items() if k in known}
    return own, {k: v for k, v in options.items() if k not in known}


def flag(options: dict[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"option {name}={value!r} must be true or false")


def safe_name(value: str, what: str) -> str:
    if not SAFE_NAME.match(value):
        raise ConfigError(f"{what} {value!r} must be letters, digits and _ (at most 63)")
    return value


class SQLBackend(Backend):
    """The contract over named queries. Subclasses: PostgresBackend, MySQLBackend."""

    dialect: ClassVar[str]  # the folder of its .sql files
    options_known: ClassVar[tuple[str, ...]] = ("migrate", "pool_size")

    def __init__(self, url: str, **options: Any) -> None:
        self.url = url
        self.options, self.driver_options = url_options(url, options, self.options_known)
        self.names = self.table_names()
        self.q = load_queries(self.dialect, self.names)
        self.migrations: list[Migration] = load_migrations(self.dialect, self.names)
        self.open()
        self.migrated: list[str] = []  # what opening applied (`deferq migrate` reports it)
        try:
            if flag(self.options, "migrate", True):
                self.migrated = self.migrate()
            else:
                self.check_schema()
        except BaseException:
            self.close()
            raise

    # -- what a dialect provides ------------------------------------------------------

    def table_names(self) -> dict[str, str]:
        """Template names for the .sql files: at least jobs, kv, migrations."""
        raise NotImplementedError

    def open(self) -> None:
        """Create the connection pool (lazily connecting is fine)."""

    def run(
        self, plan: Plan[T], *, atomic: bool = False, connection: Any = None, durable: bool = True
    ) -> T:
        """Run a plan on a pooled connection (one transaction if `atomic`), or on the
        caller's `connection`, inside its transaction, never committing it.

        `durable=False` marks the worker's own bookkeeping (claims, heartbeats, settles,
        recoveries, purges): a database crash may forget its last moments, which
        at-least-once absorbs (the job runs again after its lease), so a dialect may
        commit it without waiting for the disk. Enqueues are always durable."""
        raise NotImplementedError

    def applied_versions(self) -> list[int]:
        """Migration versions recorded in the database ([] when there are no tables)."""
        raise NotImplementedError

    def insert_plan(self, items: Sequence[Enqueue], indexes: Sequence[int]) -> Plan[dict[int, Job]]:
        """Insert items[i] for i in `indexes`; return {i: stored job} for those that went
        in (the others met an unfinished job holding their key)."""
        raise NotImplementedError

    def migration_lock(self) -> AbstractContextManager[Callable[[Migration], None]]:
        """Hold the database's migration lock (creating the migrations table); give a
        function that applies one migration and records it."""
        raise NotImplementedError

    def claim_plan(
        self, queues: Sequence[str], limit: int, worker: str, lease: float, priorities: Sequence[int]
    ) -> Plan[list[Job]]:
        raise NotImplementedError

    # -- schema -------------------------------------------------------------------------

    @property
    def schema_version(self) -> int:
        return self.migrations[-1].version

    def pending_migrations(self) -> list[Migration]:
        applied = set(self.applied_versions())
        newer = max(applied, default=0)
        if newer > self.schema_version:  # a rolling deploy: say so, keep working
            log.warning("the database has deferq schema version %d, newer than this deferq's "
                        "%d: upgrade deferq here", newer, self.schema_version)  # fmt: skip
        return [m for m in self.migrations if m.version not in applied]

    def migrate(self) -> list[str]:
        if not self.pending_migrations():
            return []
        applied = []
        with self.migration_lock() as apply:
            for migration in self.pending_migrations():  # again: another may have run them
                apply(migration)
                applied.append(migration.label)
        return applied

    def check_schema(self) -> None:
        """Refuse to run on tables older than this code (when not migrating by itself)."""
        pending = self.pending_migrations()
        if pending:
            applied = [m.version for m in self.migrations if m not in pending]
            found = f"version {max(applied)}" if applied else "no deferq tables"
            raise SchemaOutdated(
                f"the database has {found} but this deferq needs schema version "
                f"{self.schema_version}: run `deferq migrate`"
            )

    # -- producing ------------------------------------------------------------------------

    def enqueue_many(self, items: Sequence[Enqueue], connection: Any = None) -> list[Job]:
        if not items:
            return []
        return self.run(self.enqueue_plan(items), connection=connection)

    def enqueue_plan(self, items: Sequence[Enqueue]) -> Plan[list[Job]]:
        stored = yield from self.insert_plan(items, range(len(items)))
        if len(stored) == len(items):
            return [stored[i] for i in range(len(items))]
        return (yield from self.resolve_keys(items, stored, partial(self.insert_plan, items)))

    @staticmethod
    def payload(job: Job) -> str:
        return dumps([job.args, job.kwargs], f"the arguments of {job.task}()").decode()

    def resolve_keys(
        self, items: Sequence[Enqueue], stored: dict[int, Job], retry: Callable[[list[int]], Plan[dict[int, Job]]]
    ) -> Plan[list[Job]]:
        """Jobs not stored because their key is held: answer with the holder (invariant 7).

        `stored` maps item index -> stored job. A key freed between the insert and this
        look-up is inserted again by `retry` (indexes of the items to try).
        """
        for _ in range(KEY_RETRIES):
            missing = [i for i in range(len(items)) if i not in stored]
            if not missing:
                break
            keys = sorted({items[i].job.key for i in missing if items[i].job.key})
            reply = yield Step(self.q["live_by_keys"], {"keys": list(keys)})
            holders = {row[9]: job_from_row(row[:17], row[17]) for row in reply.rows}
            again = []
            for i in missing:
                holder = holders.get(items[i].job.key)
                if holder is not None:
                    stored[i] = holder
                else:
                    again.append(i)
            if again:
                stored.update((yield from retry(again)))
        if len(stored) < len(items):
            raise ConfigError("could not store jobs whose unique keys keep changing hands")
        return [stored[i] for i in range(len(items))]

    # -- consuming ------------------------------------------------------------------------

    def reserve(
        self, queues: Sequence[str], limit: int, worker: str, lease: float, priorities: Sequence[int]
    ) -> list[Job]:
        if limit <= 0 or not queues:
            return []
        return self.run(self.claim_plan(queues, limit, worker, lease, priorities), durable=False)

    @staticmethod
    def claim_order(jobs: list[tuple[Job, int]], priorities: Sequence[int]) -> list[Job]:
        """(job, seq) pairs in claim order: preferred priority, due time, enqueue order."""
        rank = {p: i for i, p in enumerate(priorities)}
        jobs.sort(key=lambda pair: (rank.get(pair[0].priority, 9), pair[0].run_at, pair[1]))
        return [job for job, _ in jobs]

    def _fenced(self, sql: str, jobs: Sequence[Job], extra: list[dict[str, Any]]) -> list[bool]:
        """Run a statement fenced by (id, worker, attempts) for each job, in one transaction."""
        params = [
            {"id": job.id, "worker": job.worker, "attempts": job.attempts, **more}
            for job, more in zip(jobs, extra, strict=True)
        ]
        return self.run(self.fenced_plan(sql, params), durable=False)

    def fenced_plan(self, sql: str, params: list[dict[str, Any]]) -> Plan[list[bool]]:
        """Whether each entry applied. Here: one statement per entry (its row count)."""
        reply = yield Step(sql, params, many=True, begin=True, commit=True)
        return [count == 1 for count in reply.counts]

    def heartbeat(self, jobs: Sequence[Job], lease: float) -> set[str]:
        if not jobs:
            return set()
        applied = self._fenced(self.q["heartbeat"], jobs, [{"lease": lease}] * len(jobs))
        return {job.id for job, ok in zip(jobs, applied, strict=True) if not ok}

    def settle(self, outcomes: Sequence[Outcome]) -> list[bool]:
        if not outcomes:
            return []
        extra = []
        for outcome in outcomes:
            if outcome.kind not in STORED_STATE:
                raise ValueError(f"unknown outcome {outcome.kind!r}")
            result = None
            if outcome.kind == "succeeded" and outcome.result is not None:
                result = dumps(outcome.result, "the task's result").decode()
            extra.append({
                "kind": outcome.kind, "state": STORED_STATE[outcome.kind],
                "released": int(outcome.kind == "release"), "delay": float(outcome.delay),
                "error": outcome.error, "result": result,
            })  # fmt: skip
        return self._fenced(self.q["settle"], [o.job for o in outcomes], extra)

    def recover_expired(self) -> int:
        return self.run(self._count(self.q["recover_expired"]), durable=False)

    def next_due(self, queues: Sequence[str]) -> tuple[float | None, float]:
        """(earliest due time of a waiting job of `queues` or None, the clock now)."""
        return self.run(self._next_due_plan(queues), durable=False)

    def _next_due_plan(self, queues: Sequence[str]) -> Plan[tuple[float | None, float]]:
        reply = yield Step(self.q["next_due"], {"queues": list(queues)})
        due, now = reply.rows[0]
        return due, now

    # -- inspecting and managing ------------------------------------------------------

    def _jobs(self, sql: str, params: dict[str, Any]) -> Plan[list[Job]]:
        reply = yield Step(sql, params)
        return [job_from_row(row[:17], row[17]) for row in reply.rows]

    @staticmethod
    def _count(sql: str, params: dict[str, Any] | None = None) -> Plan[int]:
        reply = yield Step(sql, params or {})
        return reply.rowcount

    def now(self) -> float:
        def plan() -> Plan[float]:
            reply = yield Step(self.q["clock"])
            return float(reply.rows[0][0])

        return self.run(plan())

    def get(self, job_id: str) -> Job | None:
        found = self.run(self._jobs(self.q["get"], {"id": job_id}))
        return found[0] if found else None

    def get_by_key(self, key: str) -> Job | None:
        found = self.run(self._jobs(self.q["get_by_key"], {"key": key}))
        return found[0] if found else None

    def cancel(self, job_id: str) -> bool:
        return self.run(self._count(self.q["cancel"], {"id": job_id})) == 1

    def retry_dead(self, job_id: str) -> bool:
        try:
            return self.run(self._count(self.q["retry_dead"], {"id": job_id})) == 1
        except Exception as exc:
            if self.is_unique_violation(exc):
                return False  # a newer unfinished job holds its key
            raise

    def is_unique_violation(self, exc: BaseException) -> bool:
        raise NotImplementedError

    def list_jobs(self, state: JobState, queue: str | None = None, limit: int = 100) -> list[Job]:
        state = JobState(state)
        name = "list_finished" if state in FINISHED_STATES else f"list_{state}"
        params = {"state": str(state), "queue": queue, "limit": int(limit)}
        return self.run(self._jobs(self.q[name], params))

    def purge(self, states: Iterable[JobState], older_than: float = 0.0) -> int:
        states = finished_only(states)
        if not states:
            return 0
        params = {"states": [str(s) for s in states], "older_than": older_than, "batch": PURGE_BATCH}
        total = 0
        while True:
            deleted = self.run(self._count(self.q["purge"], params), durable=False)
            total += deleted
            if deleted < PURGE_BATCH:
                return total

    def stats(self) -> dict[str, QueueStats]:
        def plan() -> Plan[list[tuple[Any, ...]]]:
            reply = yield Step(self.q["stats"])
            return reply.rows

        result: dict[str, QueueStats] = {}
        for queue, state, count, oldest in self.run(plan()):
            stats = result.setdefault(queue, QueueStats())
            stats.counts[state] = int(count)
            if oldest:
                stats.oldest_wait = max(stats.oldest_wait, float(oldest))
        return result

    # -- kv --------------------------------------------------------------------------------

    def kv_put(
        self, namespace: str, key: str, value: bytes, ttl: float | None = None, only_new: bool = False
    ) -> bool:
        params = {"namespace": namespace, "key": key, "value": bytes(value), "ttl": ttl or None}
        if not only_new:
            self.run(self._count(self.q["kv_put"], params))
            return True

        def plan() -> Plan[bool]:
            yield Step(self.q["kv_delete_expired"], params)
            reply = yield Step(self.q["kv_insert_new"], params)
            return reply.rowcount == 1

        return self.run(plan(), atomic=True)

    def kv_get(self, namespace: str, key: str) -> bytes | None:
        def plan() -> Plan[bytes | None]:
            reply = yield Step(self.q["kv_get"], {"namespace": namespace, "key": key})
            return bytes(reply.rows[0][0]) if reply.rows else None

        return self.run(plan())

    def kv_delete(self, namespace: str, key: str) -> bool:
        return self.run(self._count(self.q["kv_delete"], {"namespace": namespace, "key": key})) == 1

    def kv_list(self, namespace: str) -> dict[str, bytes]:
        def plan() -> Plan[dict[str, bytes]]:
            reply = yield Step(self.q["kv_list"], {"namespace": namespace})
            return {key: bytes(value) for key, value in reply.rows}

        return self.run(plan())


def migrate_store(url: str) -> list[str]:
    """`deferq migrate`: open the store migrating, whatever its URL's ?migrate= says,
    and name the migrations applied (none for stores without a schema)."""
    from .. import SCHEMES, open_backend

    scheme = urlsplit(url).scheme.lower()
    is_sql = scheme in SCHEMES and SCHEMES[scheme][0].startswith("sql.")
    backend = open_backend(url, **({"migrate": True} if is_sql else {}))
    try:
        return list(getattr(backend, "migrated", [])) + backend.migrate()
    finally:
        backend.close()


def stored_view(job: Job, run_at: float, now: float) -> Job:
    """A job as just stored (due at `run_at`, created `now`), scheduled or queued."""
    return replace(job, state=state_for_waiting(run_at, now), run_at=run_at, created_at=now)


def driver_connection(connection: Any) -> Any:
    """The driver's connection under a SQLAlchemy Session or Connection; others as given.

    A Session yields the connection of its current transaction (beginning one if
    needed), so the job is written, committed and rolled back with the Session.
    """
    if type(connection).__module__.startswith("sqlalchemy"):
        if hasattr(connection, "get_bind"):  # a Session
            connection = connection.connection()
        elif not connection.in_transaction():
            connection.begin()  # what its next execute() would do: commit() must see a transaction
        proxied = getattr(connection, "connection", None)  # Connection -> pool's proxy
        connection = getattr(proxied, "driver_connection", proxied)
    return connection
