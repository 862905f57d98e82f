"""What the SQL stores (SQLite, PostgreSQL, MySQL) share: every contract operation, once.

Each operation is a plan (plans.py) over named queries: the SQL text comes from the
database's `queries.sql` by name, so this file says what happens and the `.sql` files
say how each database spells it. A dialect supplies connections (`run`), the plans
whose statements differ in shape (insert, claim) and its migration lock; the
migrations table and the schema check are the same for all three.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from functools import partial
from typing import Any, ClassVar

import orjson

from ...errors import ConfigError, SchemaOutdated
from ...job import FINISHED_STATES, Job, JobState, dumps
from .. import deps, fair
from ..base import (
    BEHIND,
    HOLD_BATCH,
    HOLD_SLACK,
    LEVELS,
    STEPS,
    Backend,
    Enqueue,
    Heartbeat,
    OnConflict,
    Outcome,
    QueueStats,
    finished_only,
)
from ..history import recovered
from .adapters import flag, url_options
from .history import SQLHistory
from .plans import Plan, Reply, Step, T
from .queries import Migration, load_migrations, load_queries
from .rows import WIDTH, job_of
from .search import SQLSearch

log = logging.getLogger("deferq.sql")

#: The tables, named once. Dialects qualify them (schema / database) with `table_names`.
TABLES = {
    "jobs": "deferq_jobs", "kv": "deferq_kv", "migrations": "deferq_migrations", "paused": "deferq_paused",
    "deps": "deferq_deps", "history": "deferq_history", "fair": "deferq_fair", "holds": "deferq_holds",
}
PURGE_BATCH = 5000  # rows per purge transaction
KEY_RETRIES = 5  # a key freed between our insert and our look-up: try the insert again
RATE_NAMESPACE = "rate"  # kv records of the rate limits: each one's next free time (rate_take)
SLOTS_NAMESPACE = "slots"  # kv records of the concurrency limits: each one's holders (slot_take)
STORED_STATE = {
    "succeeded": "succeeded", "retry": "queued", "dead": "dead", "release": "queued", "snooze": "queued",
    "cancelled": "cancelled",
}
UNCOUNTED = ("release", "snooze")  # outcomes that give the attempt back


class Settled(list[bool]):
    """Whether each outcome applied, and `linked`: {id: state} of the settled jobs that
    others wait for (a dialect whose settle statement tells, sparing a look-up)."""

    def __init__(self, applied: Iterable[bool], linked: dict[str, str | None]) -> None:
        super().__init__(applied)
        self.linked = linked


def one_transaction(items: Sequence[Enqueue]) -> bool:
    """Whether an enqueue must be one transaction: jobs with their edges, or their fair
    keys' virtual times (all or nothing), or a deduplication window (its check and the
    insert, window_plan)."""
    return any(item.after or item.job.fair_key is not None or (item.unique_for and item.job.key)
               for item in items)


class SQLBackend(SQLHistory, SQLSearch, Backend):
    """The contract over named queries. Subclasses: SQLiteBackend, PostgresBackend,
    MySQLBackend.

    Options (URL or keyword): `migrate=false` never changes the schema and refuses one
    older than the code. `prepare_schema=False` (keyword only) opens without migrating
    or checking: the caller migrates (`deferq migrate`).
    """

    dialect: ClassVar[str]  # the folder of its .sql files
    options_known: ClassVar[tuple[str, ...]] = ("migrate", "pool_size")

    def __init__(self, url: str, *, prepare_schema: bool = True, **options: Any) -> None:
        self.url = url
        self.options, self.driver_options = url_options(url, options, self.options_known)
        self.names = self.table_names()
        self.q = load_queries(self.dialect, self.names)
        self.migrations: list[Migration] = load_migrations(self.dialect, self.names)
        self.open()
        try:
            if prepare_schema and flag(self.options, "migrate", True):
                self.migrate()
            elif prepare_schema:
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

    def run(self, plan: Plan[T], *, atomic: bool = False, connection: Any = None, durable: bool = True) -> T:
        """Run a plan on a pooled connection (one transaction if `atomic`), or on the
        caller's `connection`, inside its transaction, never committing it.

        `durable=False` marks the worker's own bookkeeping (claims, heartbeats, settles,
        recoveries, purges): a database crash may forget its last moments, which
        at-least-once absorbs (the job runs again after its lease), so a dialect may
        commit it without waiting for the disk. Enqueues are durable unless every job
        of the batch says `durable=False` (options.durable)."""
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
        """Lease up to `limit` jobs, in claim order; those whose expiry had passed come back
        cancelled (not leased), for `reserve` to count and leave out."""
        raise NotImplementedError

    def is_unique_violation(self, exc: BaseException) -> bool:
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
                        "%d: upgrade deferq here", newer, self.schema_version)
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
        durable = any(item.durable for item in items)
        return self.run(self.enqueue_plan(items), atomic=one_transaction(items), connection=connection,
                        durable=durable)

    def enqueue_plan(self, items: Sequence[Enqueue]) -> Plan[list[Job]]:
        answered: dict[int, Job] = {}
        if any(item.unique_for and item.job.key for item in items):
            answered = yield from self.window_plan(items)
        due_fair = [i for i, item in enumerate(items) if fair.due_fair(item) and i not in answered]
        if due_fair:
            items = yield from self.fair_plan(items, due_fair)
        rest = [i for i in range(len(items)) if i not in answered]
        stored = (yield from self.insert_plan(items, rest)) if rest else {}
        stored.update(answered)
        if len(stored) == len(items):
            jobs = [stored[i] for i in range(len(items))]
        else:
            jobs = yield from self.resolve_keys(items, stored, partial(self.insert_plan, items))
        if any(item.after for item in items):
            jobs = yield from self.link_plan(items, jobs)
        if due_fair:  # stored at the fair level: shown at their own
            jobs = [job.evolve(priority=job.priority % LEVELS) if job.priority >= LEVELS else job for job in jobs]
        return jobs

    def window_plan(self, items: Sequence[Enqueue]) -> Plan[dict[int, Job]]:
        """The deduplication window, in the enqueue's transaction before its insert: {item
        index: the job that answers it}, the newest job with its key when that succeeded
        within its window. Read under a lock on that job's row (window_holder), so a
        settle of it either came first or waits until this transaction has inserted (a
        producer racing on the key waits on the same row, then meets what this one
        stored); keys are locked in their order, so two batches never wait on each other."""
        windowed = sorted((key, i) for i, item in enumerate(items) if item.unique_for and (key := item.job.key))
        answered: dict[int, Job] = {}
        for key, i in windowed:
            reply = yield Step(self.q["window_holder"], {"key": key})
            if reply.rows and items[i].answered_by(newest := job_of(reply.rows[0]), float(reply.rows[0][WIDTH])):
                answered[i] = newest
        return answered

    def fair_plan(self, items: Sequence[Enqueue], indexes: list[int]) -> Plan[list[Enqueue]]:
        """`items` with those at `indexes` (fair keys, due now) at their fair level with their
        virtual times (fair.py), the keys' next virtual times saved: in the enqueue's
        transaction, so a producer that fails leaves them as they were."""
        entries = [((items[i].job.queue, items[i].job.priority + fair.FAIR), items[i].job.fair_key or "",
                    items[i].fair_weight) for i in indexes]
        floors: dict[Any, float] = {}
        nexts: dict[tuple[Any, str], float] = {}
        for scope in sorted({scope for scope, _, _ in entries}):
            reply = yield Step(self.q["fair_floor"], {"queue": scope[0], "level": scope[1]})
            floors[scope] = float(reply.rows[0][0]) if reply.rows and reply.rows[0][0] is not None else 0.0
            # keys behind the floor are as good as without a record: their rows go
            yield Step(self.q["fair_forget"], {"queue": scope[0], "level": scope[1], "floor": floors[scope]})
        for scope, key in sorted({(scope, key) for scope, key, _ in entries}):
            reply = yield Step(self.q["fair_next"], {"queue": scope[0], "level": scope[1], "key": key})
            if reply.rows:
                nexts[(scope, key)] = float(reply.rows[0][0])
        vtimes = fair.virtual_times(entries, floors, nexts)
        out = list(items)
        for i, vtime in zip(indexes, vtimes, strict=True):
            job = items[i].job
            out[i] = replace(items[i], job=job.evolve(priority=job.priority + fair.FAIR), vtime=vtime)
        saved = [{"queue": scope[0], "level": scope[1], "key": key, "next": at}
                 for (scope, key), at in sorted(nexts.items())]
        yield self.rows_step(self.q["fair_save"], saved)
        return out

    # -- dependencies (deps.py) -----------------------------------------------------------

    def link_plan(self, items: Sequence[Enqueue], jobs: list[Job]) -> Plan[list[Job]]:
        """Block each new job that runs after others until they settle, or cancel it now
        when one already failed. An unknown parent raises: the caller's transaction
        (enqueue_many runs this one atomic) then stores nothing."""
        parents = sorted({parent for item in items for parent in item.after})
        states = dict((yield Step(self.q["parent_states"], {"ids": parents})).rows)
        edges, blocked, out = [], [], list(jobs)
        for i, item in enumerate(items):
            if not item.after:
                continue
            job = jobs[i]
            verdicts = {}
            for parent in item.after:
                if parent not in states:
                    raise deps.unknown_parent(job.id, parent)
                verdicts[parent] = deps.verdict(states[parent], item.after_any)
            failed = next((p for p, v in verdicts.items() if v == deps.CANCEL), None)
            if failed is not None:
                error = deps.reason(failed, states[failed])
                yield Step(self.q["cancel_blocked"], {"id": job.id, "error": error})
                out[i] = job.evolve(state=JobState.CANCELLED, error=error)
            elif waiting := [p for p, v in verdicts.items() if v == deps.WAIT]:
                edges += [{"parent": p, "child": job.id, "after_any": item.after_any} for p in waiting]
                blocked.append({"id": job.id, "blockers": len(waiting)})
                out[i] = job.evolve(state=JobState.BLOCKED)
        if edges:
            yield self.rows_step(self.q["link"], edges)
            yield self.rows_step(self.q["block"], blocked)
        return out

    def rows_step(self, sql: str, rows: list[dict[str, Any]]) -> Step:
        """A statement run once per row (edges of a batch's callback: one per member),
        only the total count wanted."""
        return Step(sql, rows, many=True, batch=True)

    def dependents(self, job_id: str) -> list[str]:
        def plan() -> Plan[list[str]]:
            return [row[0] for row in (yield Step(self.q["dependents"], {"id": job_id})).rows]

        return self.run(plan())

    def count_states(self, ids: list[str]) -> dict[str, int]:
        """How many of the jobs `ids` are in each state (a batch's summary)."""

        def plan() -> Plan[dict[str, int]]:
            return {str(state): int(n) for state, n in (yield Step(self.q["count_states"], {"ids": ids})).rows}

        return self.run(plan()) if ids else {}

    def release(self, ids: Sequence[str] | None) -> int:
        """Take away the edges of the finished jobs among `ids` (None: of any finished
        job, the sweep), releasing or cancelling their children. A plain read first:
        most settles have none. Returns how many edges went."""
        if ids is not None and not ids:
            return 0
        sql, params = (self.q["finished_parents"], {"ids": list(ids)}) if ids is not None else (
            self.q["finished_parents_all"], {})

        def probe() -> Plan[dict[str, str | None]]:
            return {parent: state for parent, state in (yield Step(sql, params)).rows}

        parents = self.run(probe(), durable=False)
        return self.run(self.release_plan(parents), durable=False) if parents else 0

    def release_plan(self, parents: dict[str, str | None], own_transaction: bool = True) -> Plan[int]:
        """The edges of these finished parents ({id: state}), each taken away once
        (`take_edges` deletes them, returning (parent, child, after_any, parent state)),
        then each child's count of blockers lowered by its edges that went, in one
        UPDATE that also decides (`release_child`): queued at zero, cancelled at once
        when a parent failed. The child's row is locked only by that last statement,
        sent with the COMMIT: members of one chord never wait for each other across a
        round trip. A child cancelled here passes it on to its own children, in a
        transaction of its own (the sweep catches a crash in between); all in the
        caller's transaction when not `own_transaction`."""
        taken = 0
        while parents:
            take = Step(self.q["take_edges"], {"ids": sorted(parents)}, begin=own_transaction)
            edges = (yield take).rows
            changes = deps_changes(edges)
            if changes:
                yield Step(self.q["release_child"], changes, many=True, commit=own_transaction)
            elif own_transaction:
                yield Step("COMMIT")
            taken += len(edges)
            parents = dict.fromkeys((c["child"] for c in changes if c["error"] is not None), "cancelled")
        return taken

    @staticmethod
    def payload(item: Enqueue) -> bytes:
        """`[args, kwargs]` as JSON, as the producer encoded it (once); encoded here only
        for an `Enqueue` built without it."""
        job = item.job
        return item.payload or dumps([job.args, job.kwargs], f"the arguments of {job.task}()")

    def resolve_keys(
        self, items: Sequence[Enqueue], stored: dict[int, Job], retry: Callable[[list[int]], Plan[dict[int, Job]]]
    ) -> Plan[list[Job]]:
        """Jobs not stored because their key is held (invariant 7): the holder answers
        for them (on_conflict ignore), or takes their arguments and due time (replace,
        debounce); when the holder runs, the new job is stored to wait behind it.

        `stored` maps item index -> stored job. Items are resolved in order, so a batch
        naming one key twice replaces what it just stored. A key freed meanwhile is
        inserted again by `retry` (indexes of the items to try); every write is guarded,
        so a holder that changed state between the look-up and the write is looked up
        again rather than overwritten.
        """
        for _ in range(KEY_RETRIES):
            missing = [i for i in range(len(items)) if i not in stored]
            if not missing:
                break
            found = yield from self.holders_plan(sorted({key for i in missing if (key := items[i].job.key)}))
            again, to_queue = [], []
            for i in missing:  # in order: a batch naming one key twice replaces what it just stored
                answer = yield from self.resolve_plan(items[i], *found)
                if answer == "again":
                    again.append(i)
                elif answer == "behind":
                    to_queue.append(i)
                else:
                    stored[i] = answer  # type: ignore[assignment]
            if to_queue:
                stored.update((yield from self.queue_behind_plan(items, to_queue)))
            if again:
                stored.update((yield from retry(again)))
        if len(stored) < len(items):
            raise ConfigError("could not store jobs whose unique keys keep changing hands")
        return [stored[i] for i in range(len(items))]

    def holders_plan(self, keys: list[str]) -> Plan[tuple[dict[str | None, Job], dict[str | None, Job], float]]:
        """({key: its holder}, {key: the job waiting behind its running holder}, the clock).
        A job waiting behind a holder that is gone steps up here and holds the key."""
        reply = yield Step(self.q["holders"], {"keys": keys})
        holders: dict[str | None, Job] = {}
        behind: dict[str | None, Job] = {}
        for row in reply.rows:
            (behind if row[-1] >= BEHIND else holders)[row[9]] = job_of(row)
        orphans = sorted(key for key in behind if key is not None and key not in holders)
        if orphans:
            yield Step(self.q["step_up"], {"keys": orphans})
            holders.update((key, behind.pop(key)) for key in orphans)
        return holders, behind, float(reply.rows[0][WIDTH]) if reply.rows else 0.0

    def resolve_plan(
        self, item: Enqueue, holders: dict[str | None, Job], behind: dict[str | None, Job], now: float
    ) -> Plan[Job | str]:
        """The job that answers for `item`, whose key is held; or "again" (the key is free
        now: insert it) or "behind" (the holder runs: store it to wait behind)."""
        key = item.job.key
        holder, successor = holders.get(key), behind.get(key)
        if holder is None and successor is None:
            return "again"
        if item.on_conflict is OnConflict.IGNORE:
            return successor or holder  # type: ignore[return-value]
        target = successor or (holder if holder and holder.state != JobState.ACTIVE else None)
        if target is None:
            return "behind"  # the running holder is never changed
        updated = yield from self.replace_plan(item, target, now)
        if updated is None:
            return "again"
        (behind if target is successor else holders)[key] = updated  # a later item of the batch sees it
        return updated

    def replace_plan(self, item: Enqueue, target: Job, now: float) -> Plan[Job | None]:
        """`target` (waiting) with `item`'s arguments and new due time; None if it stopped
        waiting meanwhile."""
        updated = item.updated(target, now)
        params = {"id": target.id, "payload": self.payload_param(item), "run_at": updated.run_at}
        reply = yield Step(self.q["replace"], params)
        return updated if reply.rowcount == 1 else None

    def queue_behind_plan(self, items: Sequence[Enqueue], indexes: list[int]) -> Plan[dict[int, Job]]:
        """Store items to wait behind the running holder of their key (priority raised by
        BEHIND, out of the claims' reach, until `step_up`). The holder may have ended in the
        meantime: step up at once."""
        raised = list(items)
        for i in indexes:
            raised[i] = replace(items[i], job=items[i].job.evolve(priority=items[i].job.priority + BEHIND))
        placed = yield from self.insert_plan(raised, indexes)
        if placed:
            yield Step(self.q["step_up"], {"keys": sorted({items[i].job.key for i in placed})})
        return {i: job.evolve(priority=items[i].job.priority) for i, job in placed.items()}

    def payload_param(self, item: Enqueue) -> Any:
        """The payload as the dialect binds it into its `replace` query."""
        return self.payload(item).decode()

    # -- consuming ------------------------------------------------------------------------

    def reserve(
        self, queues: Sequence[str], limit: int, worker: str, lease: float, priorities: Sequence[int]
    ) -> list[Job]:
        if limit <= 0 or not queues:
            return []
        claimed = self.run(self.claim_plan(queues, limit, worker, lease, priorities), durable=False)
        leased = [job for job in claimed if job.state == JobState.ACTIVE]
        if len(leased) < len(claimed):  # the others had expired: cancelled instead (claim_plan)
            self.count_ended((job.queue, job.task, "expired") for job in claimed if job.state != JobState.ACTIVE)
        return leased

    @staticmethod
    def claim_order(jobs: list[tuple[Job, int, int, float]], levels: Sequence[int]) -> list[Job]:
        """(job, seq, stored level, order) in claim order: the levels' order (fair.claim_levels),
        then `order` (due time, or virtual time at a fair level), then enqueue order."""
        rank = {p: i for i, p in enumerate(levels)}
        jobs.sort(key=lambda found: (rank.get(found[2], 99), found[3], found[1]))
        return [found[0] for found in jobs]

    @staticmethod
    def fence_params(jobs: Sequence[Job], extra: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Parameters of a statement fenced by (id, worker, attempts), one entry per job."""
        return [
            {"id": job.id, "worker": job.worker, "attempts": job.attempts, **more}
            for job, more in zip(jobs, extra, strict=True)
        ]

    def fenced_step(self, sql: str, params: list[dict[str, Any]]) -> Step:
        """A fenced statement over a batch. Here: one run per entry, in one transaction."""
        return Step(sql, params, many=True, begin=True, commit=True)

    def fenced_plan(self, sql: str, params: list[dict[str, Any]]) -> Plan[list[bool]]:
        """Whether each entry applied."""
        reply = yield self.fenced_step(sql, params)
        return self.applied(reply, params)

    def applied(self, reply: Reply, params: list[dict[str, Any]]) -> list[bool]:
        """Which entries of a fenced step applied. Here: each run's row count."""
        return [count == 1 for count in reply.counts]

    def heartbeat(self, jobs: Sequence[Job], lease: float) -> Heartbeat:
        if not jobs:
            return Heartbeat()
        params = self.fence_params(jobs, [{"lease": lease}] * len(jobs))
        held = self.run(self.heartbeat_plan(params), durable=False)
        return Heartbeat([j.id for j in jobs if j.id not in held], [i for i, asked in held.items() if asked])

    def heartbeat_plan(self, params: list[dict[str, Any]]) -> Plan[dict[str, bool]]:
        """{id: whether its cancel was requested} of the leases that held: the heartbeat
        statement returns (id, cancel_requested_at) of each."""
        reply = yield self.fenced_step(self.q["heartbeat"], params)
        return {row[0]: row[1] is not None for row in reply.rows}

    def record_progress(self, jobs: Sequence[Job]) -> set[str]:
        reports = [{"progress": job.progress, "message": job.progress_message} for job in jobs]
        return self.lost_leases(self.q["progress"], jobs, reports)

    def lost_leases(self, sql: str, jobs: Sequence[Job], extra: Iterable[dict[str, Any]]) -> set[str]:
        """Run a fenced statement per job (heartbeat, progress); ids whose fence failed."""
        if not jobs:
            return set()
        applied = self.run(self.fenced_plan(sql, self.fence_params(jobs, extra)), durable=False)
        return {job.id for job, ok in zip(jobs, applied, strict=True) if not ok}

    def settle(self, outcomes: Sequence[Outcome]) -> list[bool]:
        if not outcomes:
            return []
        keys = sorted({o.job.key for o in outcomes if o.job.key})
        if keys:  # a job waiting behind one of these may step up: in the same transaction
            applied = self.run(self.settle_keyed_plan(outcomes, keys), atomic=True, durable=False)
        else:
            applied = self.run(self.settle_plan(outcomes), durable=False)
        linked = getattr(applied, "linked", None)  # a settle that said which jobs others wait for
        if linked is None:
            settled = zip(outcomes, applied, strict=True)
            self.release([o.job.id for o, ok in settled if ok and o.kind not in UNCOUNTED])
        elif linked:
            self.run(self.release_plan(linked), durable=False)
        return applied

    def settle_keyed_plan(self, outcomes: Sequence[Outcome], keys: list[str]) -> Plan[list[bool]]:
        """Settle, then jobs waiting behind a holder that just finished take its place
        (`step_up`), inside the caller's transaction (`run(atomic=True)`): an enqueue
        racing for the key meets the holder or its successor, never a gap."""
        params = self.settle_params(outcomes)
        reply = yield self.fenced_step(self.q["settle"], params)._replace(begin=False, commit=False)
        yield Step(self.q["step_up"], {"keys": keys})
        applied = self.applied(reply, params)
        if self.settles_steps:
            yield from self.steps_expiry_plan(outcomes, applied)
        return applied

    def steps_expiry_plan(self, outcomes: Sequence[Outcome], applied: Sequence[bool]) -> Plan[None]:
        """Inside a settle's transaction (`settles_steps`): the checkpoints of the durable
        jobs that ended expire with their results. Nothing for a batch without one."""
        ended = [o for o, ok in zip(outcomes, applied, strict=True) if ok and o.steps_keep is not None]
        if ended:
            keep = max(max(o.steps_keep or 0.0 for o in ended), 1.0)
            namespaces = self.in_param([STEPS + o.job.id for o in ended])
            yield Step(self.q["kv_expire_many"], {"namespaces": namespaces, "ttl": keep})

    def settle_plan(self, outcomes: Sequence[Outcome]) -> Plan[list[bool]]:
        """The `settle` query, fenced; a dialect may have a faster path for some batches."""
        return (yield from self.fenced_plan(self.q["settle"], self.settle_params(outcomes)))

    def settle_params(self, outcomes: Sequence[Outcome]) -> list[dict[str, Any]]:
        extra = []
        for outcome in outcomes:
            if outcome.kind not in STORED_STATE:
                raise ValueError(f"unknown outcome {outcome.kind!r}")
            result = None
            if outcome.kind == "succeeded" and outcome.result is not None:
                result = dumps(outcome.result, "the task's result").decode()
            extra.append({
                "kind": outcome.kind, "state": STORED_STATE[outcome.kind],
                "released": int(outcome.kind in UNCOUNTED), "delay": float(outcome.delay),
                "error": outcome.error, "result": result,
                "waits_for": outcome.waits_for if outcome.kind == "snooze" else None,
                "due": outcome.due if outcome.kind == "snooze" else None,
                "chunk_call": outcome.chunk_call,
            })
        return self.fence_params([o.job for o in outcomes], extra)

    def recover_expired(self) -> int:
        """Also the sweep for jobs waiting behind a holder that ended some other way
        (expired at a claim, cancelled): they step up here at the latest."""
        ended = self.run(self.recover_plan(), durable=False)
        self.count_ended(cell for queue, task, state in ended for cell in recovered(queue, task, state))
        count = len(ended)
        self.sweep()
        self.release(None)
        return count

    def recover_plan(self) -> Plan[list[tuple[str, str, str]]]:
        """Expired leases recovered: (queue, task, new state) of each (RETURNING)."""
        reply = yield Step(self.q["recover_expired"])
        return [(str(queue), str(task), str(state)) for queue, task, state in reply.rows]

    def sweep(self) -> None:
        """Every job waiting behind a finished holder steps up (`step_up_all`). An enqueue
        that takes the key at the same moment wins: the sweep leaves it for next time."""
        try:
            self.run(self._count(self.q["step_up_all"]), durable=False)
        except Exception as exc:
            if not self.is_unique_violation(exc):
                raise

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
        return [job_of(row) for row in reply.rows]

    @staticmethod
    def _count(sql: str, params: dict[str, Any] | None = None) -> Plan[int]:
        reply = yield Step(sql, params or {})
        return reply.rowcount

    @staticmethod
    def _count_each(sql: str, runs: list[dict[str, Any]]) -> Plan[int]:
        """One statement run once per entry (pipelined, or in one packet, where the
        driver can), the rows counted over all."""
        reply = yield Step(sql, runs, many=True)
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
        cancelled = self.run(self._count(self.q["cancel"], {"id": job_id})) == 1
        if cancelled:
            self.sweep()  # a job waiting behind it, if it held a key, takes its place
            self.release([job_id])
        return cancelled

    def wake(self, job_id: str) -> bool:
        return self.run(self._count(self.q["wake"], {"id": job_id})) == 1

    def wake_many(self, job_ids: Sequence[str]) -> int:
        if not job_ids:
            return 0
        return self.run(self._count_each(self.q["wake"], [{"id": job_id} for job_id in job_ids]), atomic=True)

    def retry_dead(self, job_id: str) -> bool:
        return self._requeue("retry_dead", job_id)

    def rerun(self, job_id: str) -> bool:
        return self._requeue("rerun", job_id)

    def _requeue(self, query: str, job_id: str) -> bool:
        """A finished job queued again (`query`: which ones may be); False when it is not one."""
        try:
            return self.run(self._count(self.q[query], {"id": job_id})) == 1
        except Exception as exc:
            if self.is_unique_violation(exc):
                return False  # a newer unfinished job holds its key
            raise

    def run_now(self, job_id: str) -> bool:
        return self.run(self._count(self.q["run_now"], {"id": job_id})) == 1

    def list_jobs(self, state: JobState, queue: str | None = None, limit: int = 100) -> list[Job]:
        state = JobState(state)
        name = "list_finished" if state in FINISHED_STATES or state == JobState.BLOCKED else f"list_{state}"
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

    def delete(self, job_id: str) -> bool:
        return self.run(self._count(self.q["delete"], {"id": job_id})) == 1

    def set_remark(self, job_id: str, remark: str | None) -> bool:
        return self.run(self._count(self.q["set_remark"], {"id": job_id, "remark": remark})) == 1

    def reseal(self, job_id: str, old: str, new: str) -> bool:
        params = {"id": job_id, "old": old, "new": new, "old_json": f'"{old}"', "new_json": f'"{new}"'}
        return self.run(self._count(self.q["reseal"], params)) == 1

    def pause(self, queue: str) -> bool:
        return self.run(self._count(self.q["pause"], {"queue": queue})) == 1

    def resume(self, queue: str) -> bool:
        return self.run(self._count(self.q["resume"], {"queue": queue})) >= 1

    def paused(self) -> dict[str, float]:
        def plan() -> Plan[dict[str, float]]:
            reply = yield Step(self.q["paused"])
            return {queue: float(since) for queue, since in reply.rows}

        return self.run(plan())

    def stats(self) -> dict[str, QueueStats]:
        def plan() -> Plan[Sequence[tuple[Any, ...]]]:
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

    def kv_put_many(self, records: Sequence[tuple[str, str, bytes]], only_new: bool = False) -> int:
        runs = [{"namespace": namespace, "key": key, "value": bytes(value), "ttl": None}
                for namespace, key, value in records]
        if not runs:
            return 0

        def plan() -> Plan[int]:
            if only_new:
                yield Step(self.q["kv_delete_expired"], runs, many=True)
            return (yield from self._count_each(self.q["kv_insert_new" if only_new else "kv_put"], runs))

        return self.run(plan(), atomic=True)

    def kv_swap(self, namespace: str, key: str, expected: bytes, value: bytes, ttl: float | None = None) -> bool:
        params = {"namespace": namespace, "key": key, "expected": bytes(expected), "value": bytes(value),
                  "ttl": ttl or None}
        return self.run(self._count(self.q["kv_swap"], params)) == 1

    def kv_expire(self, namespace: str, ttl: float) -> int:
        return self.run(self._count(self.q["kv_expire"], {"namespace": namespace, "ttl": float(ttl)}))

    def kv_expire_many(self, namespaces: Sequence[str], ttl: float) -> int:
        if not namespaces:
            return 0
        params = {"namespaces": self.in_param(namespaces), "ttl": float(ttl)}
        return self.run(self._count(self.q["kv_expire_many"], params), durable=False)

    def kv_put_leased(self, job: Job, lease: float, namespace: str, key: str,
                      value: bytes) -> tuple[bool, bytes | None]:
        """The record stored in one statement where the lease holds (SQLite), else in one
        transaction (MySQL: the fenced lease renewal, then the record)."""
        if "kv_put_leased" not in self.q:
            return self.run(self.kv_put_leased_plan(job, lease, namespace, key, value), atomic=True)
        params = {"id": job.id, "worker": job.worker, "attempts": job.attempts,
                  "namespace": namespace, "key": key, "value": bytes(value)}

        def plan() -> Plan[tuple[bool, bytes | None]]:
            if (yield Step(self.q["kv_put_leased"], params)).rowcount == 1:
                return True, None
            [(held, kept)] = (yield Step(self.q["kv_lease_check"], params)).rows
            return bool(held), None if kept is None or not held else bytes(kept)

        return self.run(plan())

    def kv_put_leased_plan(self, job: Job, lease: float, namespace: str, key: str,
                           value: bytes) -> Plan[tuple[bool, bytes | None]]:
        """The fenced lease renewal, then the record unless one is there (or the one kept)."""
        [fence] = self.fence_params([job], [{"lease": lease}])
        params = {"namespace": namespace, "key": key, "value": bytes(value), "ttl": None}
        if (yield Step(self.q["heartbeat"], fence)).rowcount != 1:
            return False, None
        yield Step(self.q["kv_delete_expired"], params)
        if (yield Step(self.q["kv_insert_new"], params)).rowcount == 1:
            return True, None
        kept = (yield Step(self.q["kv_get"], params)).rows
        return True, bytes(kept[0][0]) if kept else None

    def kv_put_within(self, connection: Any, namespace: str, key: str, value: bytes) -> bool:
        params = {"namespace": namespace, "key": key, "value": bytes(value), "ttl": None}

        def plan() -> Plan[bool]:
            yield Step(self.q["kv_delete_expired"], params)
            reply = yield Step(self.q["kv_insert_new"], params)
            return reply.rowcount == 1

        return self.run(plan(), connection=connection)

    def rate_take(self, key: str, interval: float) -> tuple[float, float]:
        """The limit's next free time is a kv record ("rate" namespace), moved on under
        its row lock."""

        def take(value: bytes, now: float) -> tuple[bytes, tuple[float, float]]:
            turn = max(float(value), now)
            return repr(turn + interval).encode(), (turn, now)

        return self._change_record(RATE_NAMESPACE, key, b"0", take)

    def limit_hold(self, names: Sequence[str], held: Sequence[tuple[Job, float]]) -> None:
        def plan() -> Plan[None]:
            for name in names:
                yield Step(self.q["hold_prune"], {"name": name})
                notes = [{"name": name, "job_id": job.id, "due": float(due)} for job, due in held]
                yield Step(self.q["hold"], notes, many=True)

        self.run(plan(), atomic=True, durable=False)

    def limit_release(self, name: str) -> int:
        released = 0
        while True:
            taken, woken = self.run(self.limit_release_plan(name), atomic=True)
            released += woken
            if taken < HOLD_BATCH:
                return released

    def limit_release_plan(self, name: str) -> Plan[tuple[int, int]]:
        """One batch, one transaction: (notes taken, jobs made due)."""
        yield Step(self.q["hold_prune"], {"name": name})
        reply = yield Step(self.q["holds_taken"], {"name": name, "batch": HOLD_BATCH})
        notes = [(str(job_id), float(due)) for job_id, due in reply.rows]
        if not notes:
            return 0, 0
        released = yield Step(self.q["hold_release"], [{"job_id": job_id, "due": due, "slack": HOLD_SLACK}
                                                       for job_id, due in notes], many=True)
        yield Step(self.q["hold_drop"], [{"name": name, "job_id": job_id} for job_id, _ in notes], many=True)
        return len(notes), released.rowcount

    def slot_holders(self, scope: str) -> dict[str, int]:
        return _slot_record(self.kv_get(SLOTS_NAMESPACE, scope) or b"[]")[1]

    def slot_take(self, scope: str, limit: int, holder: str, drop: Sequence[str] = ()) -> int:
        def take(value: bytes, _now: float) -> tuple[bytes, int]:
            fence, holders = _slot_record(value)
            for gone in drop:
                holders.pop(gone, None)
            if holders.get(holder) == 0 or (holder not in holders and len(holders) < limit):
                fence += 1  # (0: a slot taken before fences existed, given one now)
                holders[holder] = fence
            return orjson.dumps({"fence": fence, "holders": holders}), holders.get(holder, 0)

        return self._change_record(SLOTS_NAMESPACE, scope, b"[]", take)

    def slot_release(self, scope: str, holder: str) -> bool:
        def release(value: bytes, _now: float) -> tuple[bytes, bool]:
            fence, holders = _slot_record(value)
            held = holders.pop(holder, None) is not None
            return orjson.dumps({"fence": fence, "holders": holders}), held

        return self._change_record(SLOTS_NAMESPACE, scope, b"[]", release)

    def _change_record(self, namespace: str, key: str, initial: bytes,
                       change: Callable[[bytes, float], tuple[bytes, T]]) -> T:
        """A kv record read under its row lock (SQLite: the write transaction), changed
        and written back in one transaction: `change(value, now)` -> (new value, answer).
        A missing record is first inserted in a transaction of its own, so that no
        transaction upgrades a lock it took by inserting (a deadlock on MySQL)."""
        params = {"namespace": namespace, "key": key, "value": initial, "ttl": None}

        def plan() -> Plan[tuple[T] | None]:
            reply = yield Step(self.q["kv_lock"], params)
            if not reply.rows:
                return None
            value, answer = change(bytes(reply.rows[0][0]), float(reply.rows[0][1]))
            yield Step(self.q["kv_put"], {**params, "value": value})
            return (answer,)

        done = self.run(plan(), atomic=True)
        if done is None:
            self.run(self._count(self.q["kv_insert_new"], params))
            done = self.run(plan(), atomic=True)
        assert done is not None  # inserted just now, and records are never deleted here
        return done[0]

    def kv_get(self, namespace: str, key: str) -> bytes | None:
        def plan() -> Plan[bytes | None]:
            reply = yield Step(self.q["kv_get"], {"namespace": namespace, "key": key})
            return bytes(reply.rows[0][0]) if reply.rows else None

        return self.run(plan())

    def kv_delete(self, namespace: str, key: str) -> bool:
        return self.run(self._count(self.q["kv_delete"], {"namespace": namespace, "key": key})) == 1

    def kv_delete_many(self, namespace: str, keys: Sequence[str]) -> int:
        if not keys:
            return 0
        runs = [{"namespace": namespace, "key": key} for key in keys]
        return self.run(self._count_each(self.q["kv_delete"], runs), atomic=True)

    def kv_list(self, namespace: str) -> dict[str, bytes]:
        def plan() -> Plan[dict[str, bytes]]:
            reply = yield Step(self.q["kv_list"], {"namespace": namespace})
            return {key: bytes(value) for key, value in reply.rows}

        return self.run(plan())

    def kv_list_many(self, namespaces: Sequence[str]) -> dict[str, dict[str, bytes]]:
        """One statement."""
        found: dict[str, dict[str, bytes]] = {}
        if not namespaces:
            return found

        def plan() -> Plan[dict[str, dict[str, bytes]]]:
            reply = yield Step(self.q["kv_list_many"], {"namespaces": self.in_param(namespaces)})
            for namespace, key, value in reply.rows:
                found.setdefault(namespace, {})[key] = bytes(value)
            return found

        return self.run(plan())

    def in_param(self, values: Sequence[str]) -> Any:
        """A list of values as the dialect binds it for `IN` / `= ANY`."""
        return list(values)


def deps_changes(edges: Iterable[Sequence[Any]]) -> list[dict[str, Any]]:
    """What the edges taken away (parent, child, after_any, parent state) do to each
    child, by the rules of deps.py: `taken` edges fewer to wait for, and the `error`
    that cancels it (naming a parent that failed), or None. In child order: two
    releases lock shared children in the same order."""
    changes: dict[str, dict[str, Any]] = {}
    for parent, child, after_any, state in edges:
        change = changes.setdefault(child, {"child": child, "taken": 0, "error": None})
        change["taken"] += 1
        if change["error"] is None and deps.verdict(state, bool(after_any)) == deps.CANCEL:
            change["error"] = deps.reason(parent, state)
    return [changes[child] for child in sorted(changes)]


def parent_verdicts(parents: Iterable[tuple[str, str | None]], prefix: str = "") -> dict[str, list[Any]]:
    """What each finished parent (id, state) does to a child, by the rules of deps.py,
    as arrays for a release done in one statement (PostgreSQL): whether it cancels a
    child without / with after_any, and the error that would name it."""
    pairs = sorted(parents, key=lambda pair: (pair[0], pair[1] or ""))
    return {
        prefix + "parent": [parent for parent, _ in pairs],
        prefix + "state": [state for _, state in pairs],
        prefix + "cancels": [deps.verdict(state, False) == deps.CANCEL for _, state in pairs],
        prefix + "cancels_any": [deps.verdict(state, True) == deps.CANCEL for _, state in pairs],
        prefix + "reason": [deps.reason(parent, state) for parent, state in pairs],
    }


def _slot_record(value: bytes) -> tuple[int, dict[str, int]]:
    """A concurrency limit's record: the last fence granted and each holder's fence.
    (A plain list of holders, as earlier releases wrote it, holds fence 0.)"""
    record = orjson.loads(value)
    if isinstance(record, list):
        return 0, dict.fromkeys(sorted(record), 0)
    return int(record["fence"]), dict(sorted(record["holders"].items()))
