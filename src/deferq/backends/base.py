"""The Backend contract: every state change of a job, named, each one atomic in the store.

Backends only store and move jobs. Retry policy, hooks, timeouts, priorities and
serialization live in the core (app.py, worker/); the behaviour suite in
tests/contract/ proves that every backend moves jobs the same way.

Conventions for every backend:
- Times are epoch seconds (float) by the store's clock (`now()`).
- A waiting job is stored as "queued" with a due time `run_at`; it is reported as
  SCHEDULED while `run_at` is in the future.
- A leased job carries `worker` and `attempts`; together they fence the lease: a
  settle, heartbeat or release only applies while the job is still ACTIVE under the
  same worker and attempt, so a worker whose lease expired can never overwrite the
  work of the worker that took the job over.
- Every method raises `StoreUnavailable` (`StoreFull` when the store is out of space)
  when the store cannot be reached or written: a driver's own errors never cross this
  boundary, so the worker, the master and the server judge store failures in one way.
- A store made of parts that fail alone (Redis shards) answers `stats()` and
  `list_jobs()` from the parts that answered and says which did not (`missing_from()`);
  `check()` names them too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from ..errors import ConfigError, DeferqError, SchemaOutdated, StoreUnavailable
from ..job import ALL_STATES, FINISHED_STATES, Job, JobState, carried, carry, slot_init, stamped
from ..values import MAX_DELAY, capped
from .history import HistoryStore
from .search import SearchStore

T = TypeVar("T")
log = logging.getLogger("deferq.worker")
# the namespace of a job's durable-step checkpoints (steps/checkpoints.py): + its id
STEPS = "deferq.steps:"
# meta of a child job (steps/children.py): [parent id, gather name, index, how many]
PARENT = "deferq.parent"
K = TypeVar("K", bound=Hashable)

# Waiting jobs that claims must pass over are stored with their priority level raised
# out of the levels claims read (0-2), so they stay out of the claim index while they
# still count, list and cancel as waiting jobs; a view shows the level (`% LEVELS`).
LEVELS = 10
WAIT_POLL = (0.005, 0.2)  # seconds: the first and the longest pause of wait_finished's poll
HOLD_BATCH = 500  # notes of held jobs a `limit_release` step takes: bounds one store call
HOLD_SLACK = 0.001  # seconds: a held job's due time as stored, against its note's (text rounding)
BEHIND = 20  # + priority: waits behind the running job that holds its key (on_conflict)


class OnConflict(StrEnum):
    """What to do when an unfinished job holds the key of a job being stored (`options(on_conflict=...)`);
    stored and compared as its text."""

    IGNORE = "ignore"  # return it
    REPLACE = "replace"  # replace its arguments and due time
    DEBOUNCE = "debounce"  # replace, and push its due time back to now + delay, within `max_wait`


@dataclass(frozen=True, slots=True)
class Enqueue:
    """A job to store. Due at `job.run_at` when that is set, else `delay` after now;
    expiring at `job.expires_at` when that is set, else `expires_in` after now (if set).

    `payload` is `[args, kwargs]` already encoded as JSON (the producer encodes once,
    which is also how it refuses arguments JSON cannot carry).
    """

    job: Job
    delay: float = 0.0
    payload: bytes = b""
    expires_in: float | None = None
    # What to do when an unfinished job holds `job.key`: debounce's due time is at most
    # `max_wait` after that job was first stored. A job with the key that is running is
    # never changed: with replace or debounce the new job is stored to wait behind it
    # (see BEHIND).
    on_conflict: OnConflict = OnConflict.IGNORE
    max_wait: float | None = None
    # False: the store may commit this job without waiting for its disk (options.durable;
    # PostgreSQL: synchronous_commit=off). A batch is durable if any of its jobs is.
    durable: bool = True
    # Ids of the jobs this one runs after (options.after): stored BLOCKED while any is
    # unfinished; cancelled, naming it, when one ends dead or cancelled, unless
    # `after_any` (then it runs once all have finished, whatever their outcome).
    after: tuple[str, ...] = ()
    after_any: bool = False
    # Seconds: a job with `job.key` that succeeded this recently answers instead of a new
    # one (options.unique_for, the deduplication window). Every store checks it in the
    # atomic step that stores (`answered_by`), so producers racing on the key, or the
    # key's job succeeding meanwhile, never make a second job.
    unique_for: float | None = None
    # The share of `job.fair_key` in its queue's round-robin (options.fair_weight): its
    # jobs' virtual times are 1 / weight apart (backends/fair.py).
    fair_weight: float = 1.0
    # Set by a store that claims by virtual time (SQL): this job's, when it has a fair key.
    vtime: float | None = None

    def answered_by(self, newest: Job | None, now: float) -> bool:
        """Whether `newest`, the newest job with this item's key, succeeded within the
        item's window (store time `now`), and so answers for it."""
        return (self.unique_for is not None and newest is not None and newest.state == JobState.SUCCEEDED
                and newest.finished_at is not None and newest.finished_at >= now - self.unique_for)

    def due(self, now: float) -> float:
        """When the job is due if stored at store time `now`."""
        return self.job.run_at or now + self.delay

    def expiry(self, now: float) -> float | None:
        """When the job expires if stored at store time `now` (None: never)."""
        if self.job.expires_at is not None or self.expires_in is None:
            return self.job.expires_at
        return now + self.expires_in

    def updated(self, target: Job, now: float) -> Job:
        """`target`, the waiting job holding this one's key, as on_conflict replace or
        debounce leaves it at store time `now`: this job's arguments, a new due time."""
        run_at = self.due(now)
        if self.on_conflict is OnConflict.DEBOUNCE and self.max_wait is not None:
            run_at = min(run_at, max(target.created_at + self.max_wait, now))
        return target.evolve(args=self.job.args, kwargs=self.job.kwargs, meta=self.job.meta, run_at=run_at,
                             state=state_for_waiting(run_at, now), updated_at=now)

    def stored(self, now: float) -> Job:
        """The job as stored at store time `now`: its due time set, waiting."""
        job = self.job
        run_at = self.due(now)
        return stamped(job, JobState.SCHEDULED if run_at > now else JobState.QUEUED, run_at, now,
                       self.expiry(now), now)


make_enqueue: Callable[..., Enqueue] = slot_init(Enqueue)  # one per job enqueued (make: quicker)


class OutcomeKind(StrEnum):
    """How a leased job ended."""

    SUCCEEDED = "succeeded"
    RETRY = "retry"  # due again after the outcome's `delay`; the attempt counted
    DEAD = "dead"  # attempts used up, or the job cannot run: kept for inspection
    RELEASE = "release"  # back to waiting, the attempt not counted (a graceful shutdown)
    CANCELLED = "cancelled"  # stopped because someone asked (app.cancel on an active job)
    SNOOZE = "snooze"  # due again after the outcome's `delay`, the attempt not counted (a limit)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one leased job ended, for `settle`. `kind` may be given as its string.
    `ran`: the seconds the attempt ran, as the worker that settles it measured (for the
    history and the job log); None when settled outside a worker (deferq.testing)."""

    job: Job
    kind: OutcomeKind
    delay: float = 0.0
    error: str | None = None
    result: Any = None
    ran: float | None = None
    waits_for: str | None = None  # a snooze into a durable wait: "<event>\t<key>" (Job.waits_for)
    due: float | None = None  # a snooze to a moment (a durable sleep's end, the store's clock): not now + delay
    steps_keep: float | None = None  # a durable job that ended: its checkpoints expire this long after
    chunk_call: str | None = None  # the chunk call that ran it (Job.chunk_call); None keeps the job's

    KINDS = tuple(OutcomeKind)

    def __post_init__(self) -> None:
        if type(self.kind) is not OutcomeKind:
            object.__setattr__(self, "kind", OutcomeKind(self.kind))
        # No store sees a wait it cannot keep (inf, NaN, beyond the caps): one such outcome
        # would fail the settle of its batch. The attempt's runner clamps and says so first.
        if not 0.0 <= self.delay <= MAX_DELAY:
            object.__setattr__(self, "delay", capped(self.delay))
        if self.due is not None and not 0.0 <= self.due <= (latest := time.time() + MAX_DELAY):
            object.__setattr__(self, "due", min(self.due, latest) if self.due > 0 else 0.0)


# one per job a worker runs (make: quicker, positional, for the hottest callers)
make_outcome: Callable[..., Outcome] = slot_init(Outcome)


def with_steps(outcome: Outcome) -> bool:
    """The outcome of a run that reached a durable checkpoint (they end with it) or left to
    wait for an event: what steps.Steps looks at once it is settled."""
    return outcome.steps_keep is not None or outcome.waits_for is not None


def with_children(outcome: Outcome) -> bool:
    """The outcome of a child job (its meta names its parent), or one that may be a parent's:
    a snooze (it left to wait for its children) or a cancel (its children are cancelled
    too). What steps.children.ChildEnds looks at once it is settled."""
    kind = outcome.kind
    return (kind is OutcomeKind.SNOOZE or kind is OutcomeKind.CANCELLED or outcome.job.cancel_requested
            or PARENT in outcome.job.meta)


def retried(outcome: Outcome) -> bool:
    """An attempt that failed, or one of a job that failed before: what observe/attempts
    notes (a job that succeeds at its first attempt is not looked at)."""
    return outcome.error is not None or outcome.job.attempts > 1


class Heartbeat(set[str]):
    """What `heartbeat()` returns: the ids whose lease was lost, and in
    `cancel_requested` the ids (of leases that held) that someone asked to stop."""

    def __init__(self, lost: Iterable[str] = (), cancel_requested: Iterable[str] = ()) -> None:
        super().__init__(lost)
        self.cancel_requested: set[str] = set(cancel_requested)


@dataclass(slots=True)
class QueueStats:
    """Counts by state for one queue, and how long its oldest due job has waited."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(map(str, ALL_STATES), 0))
    oldest_wait: float = 0.0  # seconds the oldest due, queued job has waited
    paused: bool = False  # set by queue_table(); stats() leaves it False

    def to_dict(self) -> dict[str, Any]:
        return {**self.counts, "oldest_wait": round(self.oldest_wait, 3), "paused": self.paused}


class Stats(dict[str, QueueStats]):
    """What `stats()` returns: QueueStats per queue, and in `missing` the parts of the
    store that did not answer (e.g. Redis shards, as host:port/db), whose jobs the counts
    leave out. A plain dict from a store that answers whole means the same as `missing=[]`."""

    def __init__(self, *args: Any, missing: Iterable[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.missing: list[str] = list(missing)


class QueueTable(dict[str, dict[str, Any]]):
    """What `App.stats()` returns: per queue its counts as plain values, and in
    `missing`, as for `Stats`, the parts of the store that did not answer."""

    def __init__(self, table: dict[str, dict[str, Any]], missing: Iterable[str] = ()) -> None:
        super().__init__(table)
        self.missing: list[str] = list(missing)


class JobList(list[Job]):
    """What `list_jobs()` returns: the jobs, and in `missing` the parts of the store that
    did not answer (their jobs are not in the list), as for `Stats`."""

    def __init__(self, jobs: Iterable[Job] = (), missing: Iterable[str] = ()) -> None:
        super().__init__(jobs)
        self.missing: list[str] = list(missing)


def queue_table(store: JobAdmin) -> Stats:
    """`stats()` with each queue marked paused or not, paused queues without jobs
    included: what `deferq queue list`, GET /v1/queues and the console show."""
    stats = store.stats()
    paused = store.paused()
    table = Stats(stats, missing=missing_from(stats))
    for queue in paused:
        table.setdefault(queue, QueueStats()).paused = True
    return table


def missing_from(answer: object) -> list[str]:
    """The parts of the store that did not answer when `answer` (of `stats()` or
    `list_jobs()`) was made; [] when the whole store answered."""
    return list(getattr(answer, "missing", ()))


class JobStore(ABC):
    """The hot path: store jobs, lease them, keep and settle the leases.

    This is all a worker and a producer need; a broker-shaped store (one that cannot
    look jobs up or list them) implements this part alone and leaves `JobAdmin` and
    `Records` to another store.
    """

    #: URL schemes this backend serves, e.g. ("sqlite",)
    schemes: tuple[str, ...] = ()

    # -- producing ------------------------------------------------------------

    @abstractmethod
    def enqueue_many(self, items: Sequence[Enqueue], connection: Any = None) -> list[Job]:
        """Store jobs in one round trip; return them as stored, in order.

        A job whose `key` is held by an unfinished job is not stored: the unfinished
        job is returned in its place (unique keys, invariant 7).
        `connection`: the caller's open database connection, to write inside its
        transaction (SQL backends, invariant 8); other backends refuse it.
        """

    # -- consuming ------------------------------------------------------------

    @abstractmethod
    def reserve(
        self,
        queues: Sequence[str],
        limit: int,
        worker: str,
        lease: float,
        priorities: Sequence[int],
    ) -> list[Job]:
        """Lease up to `limit` due jobs of `queues` to `worker` for `lease` seconds.
        Jobs of a paused queue (`pause`) are never leased.

        Jobs are taken by priority in the preference order `priorities` (the core
        rotates it to weight priorities), then by due time, then by enqueue order.
        Each leased job's `attempts` grows by one now (invariant 2). A job whose
        `expires_at` has passed is not leased: it ends cancelled, error "expired", in
        the same atomic step (so fewer than `limit` jobs may come back while more wait).
        """

    @abstractmethod
    def heartbeat(self, jobs: Sequence[Job], lease: float) -> Heartbeat:
        """Extend the leases of `jobs` to now + `lease`; return ids whose lease was lost,
        and those whose cancel was requested (how a running job hears `cancel`)."""

    @abstractmethod
    def record_progress(self, jobs: Sequence[Job]) -> set[str]:
        """Store each leased job's `progress` and `progress_message` (what the task last
        reported), fenced like a heartbeat; return ids whose lease was lost. The worker
        throttles the calls; the values stay on the job after it ends."""

    @abstractmethod
    def settle(self, outcomes: Sequence[Outcome]) -> list[bool]:
        """Record how leased jobs ended, in one round trip.

        A job whose cancel was requested never waits or dies again: any outcome but
        SUCCEEDED ends it CANCELLED (a retry it asks for would run what was cancelled).
        Returns, per outcome, whether it applied (False: the lease was lost and the
        job belongs to someone else now).
        """

    def settle_each(self, outcomes: Sequence[Outcome]) -> list[bool]:
        """`settle`, one outcome a call: after the store refused a batch (not an outage),
        no outcome fails the others. One it refuses alone is stored as what it can keep,
        said in the job's error: a success without its result, else dead (`deferq dead
        retry` runs it again); if it refuses that too, the lease expires and recovery
        runs the job again."""
        applied = []
        for outcome in outcomes:
            try:
                applied.extend(self.settle([outcome]))
                continue
            except (StoreUnavailable, SchemaOutdated):
                raise
            except Exception as exc:  # noqa: BLE001 - what the store refused is this outcome alone
                why = f"the store refused this attempt's outcome ({outcome.kind}): {type(exc).__name__}"
                log.error("job %s (%s): %s: %s", outcome.job.id, outcome.job.task, why, exc)
            kept = OutcomeKind.SUCCEEDED if outcome.kind == OutcomeKind.SUCCEEDED else OutcomeKind.DEAD
            try:
                applied.extend(self.settle([Outcome(outcome.job, kept, error=why, ran=outcome.ran,
                                                    chunk_call=outcome.chunk_call)]))
            except (StoreUnavailable, SchemaOutdated):
                raise
            except Exception as exc:  # noqa: BLE001
                log.error("job %s (%s): not even its %s outcome could be stored (%s); it runs again "
                          "when its lease expires", outcome.job.id, outcome.job.task, kept, exc)
                applied.append(False)
        return applied

    def settle_and_reserve(
        self,
        outcomes: Sequence[Outcome],
        queues: Sequence[str],
        limit: int,
        worker: str,
        lease: float,
        priorities: Sequence[int],
    ) -> tuple[list[bool], list[Job]]:
        """`settle(outcomes)` then `reserve(...)`: the worker's hot path. Stores that can
        do both in one round trip override this."""
        applied = self.settle(outcomes) if outcomes else []
        jobs = self.reserve(queues, limit, worker, lease, priorities) if limit > 0 else []
        return applied, jobs

    @abstractmethod
    def recover_expired(self) -> int:
        """Return jobs whose lease expired to waiting (or dead, if their attempts are
        used up: a job that kills its worker every time must end; or cancelled, if
        their cancel was requested). Returns how many."""

    def promote_due(self) -> int:
        """Move due scheduled jobs to their ready queues, where the store keeps them
        apart (Redis). Stores that select by due time need nothing. Returns how many."""
        return 0

    @abstractmethod
    def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        """Block until a job of `queues` may be due, or `timeout` seconds pass.
        A paused queue's jobs are not due (its resume may wake the wait).

        Must not return much later than the next scheduled job's due time, and must
        not burn CPU while it waits.
        """

    def wait_and_reserve(
        self,
        queues: Sequence[str],
        timeout: float,
        limit: int,
        worker: str,
        lease: float,
        priorities: Sequence[int],
    ) -> list[Job]:
        """`wait_for_work(...)` then `reserve(...)`: an idle worker's wait. Stores that can
        lease on the server the moment the wait ends override this (Redis), so a job
        enqueued to an idle worker starts one round trip sooner."""
        self.wait_for_work(queues, timeout)
        return self.reserve(queues, limit, worker, lease, priorities) if limit > 0 else []

    @abstractmethod
    def now(self) -> float:
        """The store's clock, epoch seconds (invariant 4)."""

    #: True when `now()` is this machine's clock, read without a round trip (memory,
    #: SQLite): callers that may reuse a remote clock's offset ask each time instead.
    local_clock = False

    def is_new(self, item: Enqueue, job: Job) -> bool:
        """Whether `job`, which `enqueue_many` returned for `item`, is `item` stored (True)
        or the unfinished job that already held its unique key (False). Stores that keep
        a job under another id than the one given (Redis shards) override this."""
        return job.id == item.job.id

    # -- life cycle ---------------------------------------------------------------

    def migrate(self) -> list[str]:
        """Bring the store's schema up to date; return what was applied."""
        return []

    def ping(self) -> None:
        """Raise StoreUnavailable if the store cannot be reached."""
        self.now()

    def check(self) -> list[str]:
        """Raise StoreUnavailable if no part of the store can be reached; else return the
        parts that cannot (e.g. Redis shards, as host:port/db): [] when it answers whole."""
        self.ping()
        return []

    def close(self) -> None:
        """Release connections and files."""

    def parts(self) -> list[tuple[str, JobStore]]:
        """The parts of the store that fail alone, by name (Redis shards, as host:port/db);
        a store that is one part answers [("store", itself)]."""
        return [("store", self)]

    def describe(self) -> dict[str, Any]:
        """What the store says of itself, for its health page: any of `version`,
        `memory_bytes` (Redis) and `size_bytes` (a SQLite file); {} when it says nothing."""
        return {}

    # -- derived conveniences --------------------------------------------------

    def refuse_connection(self, connection: Any) -> None:
        if connection is not None:
            raise ConfigError(
                f"{type(self).__name__} cannot enqueue inside a caller's transaction: "
                "transactional enqueue needs PostgreSQL or MySQL"
            )

    async def enqueue_many_async(self, items: Sequence[Enqueue], connection: Any = None) -> list[Job]:
        """Async producers. Backends with an asyncio client override this."""
        return await asyncio.to_thread(self.enqueue_many, items, connection)


class TopologyRefused(DeferqError):
    """A change to a store's shards that cannot be made (the message says why)."""


class Resharding(ABC):
    """A store's servers added, drained and removed at run time (redis+shards://, whose
    `JobAdmin.resharding()` gives it: backends/redis/reshard.py). A change answers as
    `describe()` does; one that cannot be made raises TopologyRefused."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Every shard (anchors first) with its number, name, role and state, and the
        log of changes, newest last."""

    @abstractmethod
    def add(self, server: str, who: str) -> dict[str, Any]:
        """A new server (host:port[/db], empty of this store's jobs), taking new jobs."""

    @abstractmethod
    def drain(self, name: str, who: str, drain: bool = True) -> dict[str, Any]:
        """No new jobs for an added shard (its jobs still run), or (drain=False) new jobs again."""

    @abstractmethod
    def remove(self, name: str, who: str) -> dict[str, Any]:
        """A drained shard out of the set, once it holds no unfinished job."""


class JobAdmin(ABC):
    """Inspecting and managing jobs: what the CLI, the API and the console use."""

    keys_per_queue = False  # unique keys are unique per queue (Redis), not store-wide

    @abstractmethod
    def get(self, job_id: str) -> Job | None:
        """The job with this id, in any state, or None."""

    def get_many(self, ids: Sequence[str]) -> list[Job | None]:
        """`get` of each id, in order (a chord's callback reads its members' results).
        Stores that can look many up at once override this."""
        return [self.get(job_id) for job_id in ids]

    @abstractmethod
    def get_by_key(self, key: str) -> Job | None:
        """The newest job with this unique key, in any state, or None."""

    @abstractmethod
    def cancel(self, job_id: str) -> bool:
        """Cancel a waiting job, or ask an active one to stop (its worker hears it at its
        next heartbeat; the job ends cancelled). False when it is finished or unknown."""

    @abstractmethod
    def wake(self, job_id: str) -> bool:
        """Make a job that waits for its due time due now (a durable step's event came:
        steps/checkpoints.py). False when it is not waiting for a due time (due already,
        running, finished or unknown)."""

    def wake_many(self, job_ids: Sequence[str]) -> int:
        """`wake` of each id (an event's waiting jobs); returns how many were woken.
        Stores that can wake many in a few round trips override this."""
        return sum(self.wake(job_id) for job_id in job_ids)

    @abstractmethod
    def retry_dead(self, job_id: str) -> bool:
        """Return a dead job to queued with its attempts reset. False if not dead."""

    @abstractmethod
    def rerun(self, job_id: str) -> bool:
        """Queue a finished job (succeeded, dead or cancelled) again, due now, its attempts
        reset, its result and cancel request cleared (`app.retry_from`). False if it is
        unknown, not finished, or a newer unfinished job holds its unique key."""

    @abstractmethod
    def run_now(self, job_id: str) -> bool:
        """Make a scheduled job (delayed, or waiting for its next retry) due now, its
        attempts kept. False when it is not scheduled (already due, running, finished,
        blocked) or unknown."""

    @abstractmethod
    def list_jobs(self, state: JobState, queue: str | None = None, limit: int = 100) -> list[Job]:
        """Jobs in `state` (optionally of one queue), most recently changed first."""

    @abstractmethod
    def purge(self, states: Iterable[JobState], older_than: float = 0.0) -> int:
        """Delete finished jobs in `states` that finished more than `older_than` seconds
        ago. Only finished states may be purged. Returns how many."""

    @abstractmethod
    def stats(self) -> dict[str, QueueStats]:
        """Per queue: counts by state and the oldest due job's wait."""

    def wait_finished(self, job_id: str, timeout: float) -> Job | None:
        """The job once it has finished, or as it stands after `timeout` seconds; None if
        there is no such job. Stores override `changes()` to be woken by the store; this
        default looks again after a pause that grows (a short back-off poll)."""
        deadline = time.monotonic() + max(0.0, timeout)
        pause = WAIT_POLL[0]
        while True:
            job = self.get(job_id)
            left = deadline - time.monotonic()
            if job is None or job.state.finished or left <= 0:
                return job
            if not self.changes(job_id, left if self.wakes_waiters else min(pause, left)):
                pause = min(pause * 2, WAIT_POLL[1])

    def dependents(self, job_id: str) -> list[str]:
        """Ids of the jobs still waiting for this one (their edge not yet settled); stores
        without dependencies have none."""
        return []

    #: True when `changes` returns as soon as the job itself finishes (Redis): then
    #: wait_finished gives it the whole time left instead of short polling slices.
    wakes_waiters = False

    def changes(self, job_id: str, timeout: float) -> bool:
        """Block up to `timeout` seconds until the store may have finished `job_id`; True
        when woken by the store (it says something changed), False after the timeout."""
        time.sleep(timeout)
        return False

    @abstractmethod
    def delete(self, job_id: str) -> bool:
        """Delete a finished job (succeeded, dead, cancelled) for good. False if it is
        unfinished or unknown."""

    @abstractmethod
    def set_remark(self, job_id: str, remark: str | None) -> bool:
        """Set (None: clear) a job's free-text remark, in any state. False if unknown."""

    @abstractmethod
    def reseal(self, job_id: str, old: str, new: str) -> bool:
        """Put the encrypted text `new` in place of `old` where the job still holds `old`
        whole: a JSON string of its payload or result, or its whole error or progress
        message; in one atomic step (`deferq encryption rotate`: a settle or a replace
        meanwhile wins). False when none does."""

    # -- pausing queues: kept in the store, so a pause outlives every process ----------

    @abstractmethod
    def pause(self, queue: str) -> bool:
        """Stop workers leasing jobs of `queue` (enqueues still go in; jobs already
        leased run on). False if it was paused already."""

    @abstractmethod
    def resume(self, queue: str) -> bool:
        """Let workers lease jobs of `queue` again, waking idle ones. False if it was
        not paused."""

    @abstractmethod
    def paused(self) -> dict[str, float]:
        """The paused queues, each with when it was paused (store clock)."""

    def forget_queue(self, queue: str) -> bool:
        """Drop `queue` from the store's list of queues if it holds no job and is not
        paused; say whether it is gone. For a queue nothing enqueues to any more (`deferq
        bench`'s own): a producer that names it again lists it again. Stores that keep
        no list of queues apart from their jobs have nothing to drop."""
        return queue not in self.stats() and queue not in self.paused()

    def resharding(self) -> Resharding:
        """The store's servers, to add, drain and remove at run time; TopologyRefused for a
        store that has no shards (every one but redis+shards://)."""
        raise TopologyRefused("only a redis+shards:// store has shards to add, drain or remove")


class Records(ABC):
    """Small shared records: topics, tokens, masters, workers, periodic ticks."""

    @abstractmethod
    def kv_put(
        self, namespace: str, key: str, value: bytes, ttl: float | None = None, only_new: bool = False
    ) -> bool:
        """Store a small record. With `only_new`, store it only if absent (or expired) and
        say whether it was stored: an atomic "first one wins" for many processes."""

    def kv_put_many(self, records: Sequence[tuple[str, str, bytes]], only_new: bool = False) -> int:
        """`kv_put` of each (namespace, key, value), without expiry; returns how many
        were stored. Not one transaction: each record is stored, or not, on its own.
        Stores that can write many in a few round trips override this."""
        return sum(self.kv_put(namespace, key, value, only_new=only_new) for namespace, key, value in records)

    def kv_delete_many(self, namespace: str, keys: Sequence[str]) -> int:
        """`kv_delete` of each key of one namespace; returns how many existed. Stores
        that can delete many in one round trip override this."""
        return sum(self.kv_delete(namespace, key) for key in keys)

    def kv_expire(self, namespace: str, ttl: float) -> int:
        """Every live record of a namespace expires `ttl` seconds from now; returns how
        many. Stores that can do it in one statement override this."""
        records = self.kv_list(namespace)
        for key, value in records.items():
            self.kv_put(namespace, key, value, ttl=ttl)
        return len(records)

    def kv_put_within(self, connection: Any, namespace: str, key: str, value: bytes) -> bool:
        """`kv_put(..., only_new=True)` on the caller's open database `connection`, inside
        its transaction (a durable step's checkpoint committed with the step's own rows):
        PostgreSQL and MySQL; other stores refuse it."""
        raise ConfigError(f"{type(self).__name__} cannot write inside a caller's transaction: "
                          "a step in your transaction needs PostgreSQL or MySQL")

    @abstractmethod
    def kv_swap(self, namespace: str, key: str, expected: bytes, value: bytes, ttl: float | None = None) -> bool:
        """Replace a live record whose value is `expected` by `value` (and its time to
        live by `ttl`) and say whether it did: an atomic compare-and-set, so of many
        processes that read the same value, one moves it on (leader leases, schedule ticks)."""

    @abstractmethod
    def kv_get(self, namespace: str, key: str) -> bytes | None:
        """A record, or None if absent or expired."""

    @abstractmethod
    def kv_delete(self, namespace: str, key: str) -> bool:
        """Delete a record; say whether it existed."""

    @abstractmethod
    def kv_list(self, namespace: str) -> dict[str, bytes]:
        """All live records of a namespace."""

    @abstractmethod
    def rate_take(self, key: str, interval: float) -> tuple[float, float]:
        """One turn of the rate limit `key`, whose turns are `interval` seconds apart
        (GCRA: one "theoretical arrival time" per key). Atomically: the turn is the later
        of the key's next free time and now, and the next free time moves `interval` past
        it. Returns (the turn, now), both by the store's clock: a turn in the future is
        reserved for the caller (limits/rate.py)."""

    @abstractmethod
    def limit_hold(self, names: Sequence[str], held: Sequence[tuple[Job, float]]) -> None:
        """Note that each leased job of `held` snoozes until its time (store clock: the
        moment its outcome sets) for a limit each of `names` would change (a rate's turn,
        a pause: limits/limiter.py), so that `limit_release` of one of them gives it
        back. Notes whose time has come are dropped as new ones are written (a range of
        an index). One round trip (a script a queue on Redis, one SQL transaction)."""

    @abstractmethod
    def limit_release(self, name: str) -> int:
        """Give back the jobs noted held by `name` (its rate cleared or changed, its
        pause ended): each one still waiting for the due time noted is due now. In
        batches of at most HOLD_BATCH notes, each batch one atomic step in the store (a
        Lua script a queue, one SQL transaction); the notes taken are dropped, and a job
        that is no longer so held is left alone. Returns how many jobs it made due."""

    @abstractmethod
    def slot_holders(self, scope: str) -> dict[str, int]:
        """Who holds the slots of a concurrency limit (limits/slots.py), "<job id>:<attempt>",
        each with the fence its slot was granted with, in holder order."""

    @abstractmethod
    def slot_take(self, scope: str, limit: int, holder: str, drop: Sequence[str] = ()) -> int:
        """Atomically: drop the holders in `drop` (their jobs no longer run), then let
        `holder` take a slot if fewer than `limit` hold one. Returns the fence of the
        holder's slot (0: all are taken): a number that grows each time a slot of
        `scope` is granted, and stays the same for a holder asking again."""

    @abstractmethod
    def slot_release(self, scope: str, holder: str) -> bool:
        """`holder` gives its slot back (its job ended). Says whether it held one (not:
        its run was declared over while it ran, and its slot dropped)."""


class Backend(JobStore, JobAdmin, Records, HistoryStore, SearchStore):
    """A whole store: the hot path, admin (with `find_jobs`), records and the per-minute
    history. Every store deferq ships is one."""

    def kv_put_leased(self, job: Job, lease: float, namespace: str, key: str,
                      value: bytes) -> tuple[bool, bytes | None]:
        """A leased job's own record (a durable step's checkpoint), stored only while this
        attempt still holds the job (fenced by worker and attempts, as `heartbeat` is)
        and only if no live record has the name (`kv_put(..., only_new=True)`). Returns
        (whether the lease held, the record another writer kept first: None when this
        one was stored or the lease was lost). Here: a heartbeat, then the record; stores
        that can check and store in one round trip (one statement, one script) override
        this and leave the lease as it is."""
        if job.id in self.heartbeat([job], lease):
            return False, None
        if self.kv_put(namespace, key, value, only_new=True):
            return True, None
        return True, self.kv_get(namespace, key)

    #: True when `settle` also expires the checkpoints of the outcomes that say so
    #: (`Outcome.steps_keep`) in its own transaction; else the worker asks
    #: `kv_expire_many` after it (steps/checkpoints.py `expire_ended`).
    settles_steps = False

    def kv_expire_many(self, namespaces: Sequence[str], ttl: float) -> int:
        """`kv_expire` of each namespace (the checkpoints of the jobs a worker settled
        in one batch); returns how many records will expire. Stores that can do it in
        one round trip override this."""
        return sum(self.kv_expire(namespace, ttl) for namespace in namespaces)

    def kv_list_many(self, namespaces: Sequence[str]) -> dict[str, dict[str, bytes]]:
        """`kv_list` of each namespace (those with no live record may be left out).
        Stores that can do it in one round trip override this."""
        return {namespace: self.kv_list(namespace) for namespace in namespaces}

    def with_checkpoints(self, jobs: Sequence[Job]) -> None:
        """Give each just-leased job its durable-step checkpoints (`carry`), so that its
        run reads none of its own: those whose claim knew them already (a job never
        leased before has none) keep them; the others' in one batched read
        (`kv_list_many`). A store error is logged and leaves them to their runs."""
        unknown = [job for job in jobs if carried(job) is None]
        if not unknown:
            return
        try:
            found = self.kv_list_many([STEPS + job.id for job in unknown])
        except DeferqError as exc:
            log.warning("could not read the checkpoints of %d job(s) as they were leased: %s", len(unknown), exc)
            return
        for job in unknown:
            carry(job, found.get(STEPS + job.id) or {})


def grouped(items: Iterable[T], home: Callable[[T], K]) -> dict[K, list[T]]:
    """Items by where they go (a server, a queue), each group in the items' order."""
    groups: dict[K, list[T]] = {}
    for item in items:
        groups.setdefault(home(item), []).append(item)
    return groups


def finished_only(states: Iterable[JobState | str]) -> list[JobState]:
    """The states a purge was asked for; only finished jobs may ever be purged."""
    wanted = [JobState(s) for s in states]
    if not set(wanted) <= FINISHED_STATES:
        raise ValueError("only finished jobs (succeeded, dead, cancelled) can be purged")
    return wanted


def state_for_waiting(run_at: float, now: float) -> JobState:
    """A waiting job is SCHEDULED until its due time, then QUEUED."""
    return JobState.SCHEDULED if run_at > now else JobState.QUEUED
