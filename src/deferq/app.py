"""The App: a task registry bound to one store, and the producer and admin API."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, TypeVar, Unpack, cast, overload

from . import results
from .backends import Backend
from .backends.base import QueueStats, QueueTable, missing_from, queue_table
from .backends.search import SCHEDULED_KINDS, JobPage, JobQuery, find_scheduled
from .backends.urls import check_options
from .chunks import Chunk, chunk_option
from .encryption import Encryption, Sealer
from .errors import ConfigError
from .flows import batch as batches
from .flows.chains import Inputs, with_inputs
from .job import Job, JobState, Origin
from .limits import FairQueue, Limits
from .limits.runtime import LimitsAdmin
from .middleware import Middleware
from .observe.attempts import Attempts
from .observe.history import History, HistoryRecorder
from .observe.logs import JobLog
from .options import (
    JobOptions,
    JobOptionsKw,
    PeriodicOptions,
    Seconds,
    TaskDefaults,
    TaskOptions,
    queue_name,
    remark_text,
)
from .registry import EVENTS, Registry
from .steps import Steps
from .steps import children as child_jobs
from .steps import events as step_events
from .steps.cancels import after_cancelled
from .steps.children import ChildEnds
from .task import AFTER, Call, ChunkTask, FairKeys, Hook, Runtime, Task
from .values import storable

if TYPE_CHECKING:  # the worker never calls what these serve: imported when called
    from .schedules.store import Schedules
    from .steps import check as step_check

log = logging.getLogger("deferq")
P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
Item = TypeVar("Item")  # an item of a chunk task's list

DEFAULT_URL = "sqlite:///deferq.db"
DEFAULT_WEIGHTS = (5, 3, 2)  # high : normal : low (S2-10)


def _checked(check: Callable[[Any], T], value: Any) -> T:
    """A value checked by one of deferq.options' checks; its refusal as a ConfigError."""
    try:
        return check(value)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


class _runtime_setting(Generic[T]):
    """An App attribute kept by its runtime: read and set there."""

    def __init__(self, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, app: None, owner: type) -> _runtime_setting[T]: ...
    @overload
    def __get__(self, app: App, owner: type) -> T: ...

    def __get__(self, app: App | None, owner: type) -> T | _runtime_setting[T]:
        return self if app is None else cast(T, getattr(app.runtime, self.name))

    def __set__(self, app: App, value: T) -> None:
        setattr(app.runtime, self.name, value)


class App:
    """``App(url)`` binds tasks to a store. The URL picks the backend.

    Without a URL, ``DEFERQ_URL`` is used, else ``sqlite:///deferq.db``.
    ``eager=True`` (or ``memory://?eager=1``) runs each task at enqueue, in the
    caller's thread: for users' unit tests. ``durable=False`` makes every enqueue's
    commit skip waiting for the disk on PostgreSQL (per job: ``options(durable=...)``).
    ``encryption=deferq.Encryption(keys={...}, current=...)`` encrypts job arguments,
    results, errors and progress messages at rest (docs/encryption.md).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        eager: bool = False,
        lease: float = 30.0,
        result_ttl: float = 3600.0,
        priority_weights: Sequence[int] = DEFAULT_WEIGHTS,
        durable: bool = True,
        encryption: Encryption | None = None,
        **backend_options: Any,
    ) -> None:
        url = url or os.environ.get("DEFERQ_URL") or DEFAULT_URL
        check_options(url)  # a misspelt option is refused here, not at the first call
        self.eager = eager or "eager=1" in url or "eager=true" in url
        if self.eager and not url.startswith("memory:"):
            raise ConfigError("eager mode runs on memory:// only (it is for unit tests)")
        if lease < 1:
            raise ConfigError(f"lease must be at least 1 second, got {lease}")
        if len(priority_weights) != 3 or any(w < 1 for w in priority_weights):
            raise ConfigError("priority_weights needs three positive numbers (high, normal, low)")
        weights = tuple(int(w) for w in priority_weights)
        self.registry = Registry()
        # what runs under this App (task.Runtime): the store, the settings, the enqueue pipeline.
        # durable=False: enqueues that do not say otherwise commit without waiting for the disk
        # (options.durable: PostgreSQL's synchronous_commit=off; nothing on other stores)
        self.runtime: Runtime[Registry] = Runtime(
            url, self.registry, self.registry.chain, self.registry.tasks, self.registry.fair_queues,
            lease=float(lease), result_ttl=float(result_ttl),
            priority_weights=(weights[0], weights[1], weights[2]),
            durable=bool(durable), eager=self.eager, backend_options=backend_options)
        self.tasks: dict[str, Task[..., Any]] = self.registry.tasks  # the same dict: name -> Task
        self.hooks: dict[str, list[Hook]] = self.registry.hooks
        self.fair_queues: dict[str, FairKeys] = self.registry.fair_queues  # app.fair_queue: queue -> it
        self.periodic_jobs: list[Any] = self.runtime.periodic_jobs  # filled by app.periodic; stored at start
        # deferq's own middleware, first: their before-hooks run before, their after-hooks
        # after, every other middleware's (the order of middleware.Chain)
        self._history = History(lambda: self.backend, self.lease)
        changed = self.registry.chain.changed  # a plug-in idle or busy again: the chain looks again
        self._limiter = Limits(self.registry.limits, lambda: self.backend, changed)
        self._batch_join = batches.BatchJoin(changed)
        for middleware in (self._batch_join, self._history, JobLog(),
                           Attempts(lambda: self.backend, self._sealer),
                           self._limiter, Steps(lambda: self.backend, self.lease, self.result_ttl, self.runtime),
                           ChildEnds(lambda: self.backend, self._sealer),
                           Inputs(lambda: self.backend)):
            self.registry.add_middleware(middleware)
        # limits set, changed and cleared at run time, kept in the store (limits/runtime.py)
        self.limits = LimitsAdmin(lambda: self.backend, self._limiter.wake)
        self._origin = self.runtime.origin = Origin(self.wait, self.wait_async)  # what its jobs wait through
        if encryption is not None:
            self.use_encryption(encryption)
        if self.eager:
            from .testing import EagerRunner

            self.add_middleware(EagerRunner(self))

    # -- the store ---------------------------------------------------------------

    @property
    def backend(self) -> Backend:
        """The store, opened on first use (so importing a tasks module costs nothing)."""
        return self.runtime.backend

    # the settings, kept by the runtime (what a Worker and the features read)
    url = _runtime_setting[str]("url")
    lease = _runtime_setting[float]("lease")
    result_ttl = _runtime_setting[float]("result_ttl")
    priority_weights = _runtime_setting[tuple[int, int, int]]("priority_weights")
    durable = _runtime_setting[bool]("durable")

    @property
    def limiter(self) -> Limits:
        """The middleware that holds jobs to their limits (limits/limiter.py): idle while
        none is declared or set; a worker's keeper ticks it (Middleware.worker_tick)."""
        return self._limiter

    @property
    def history(self) -> HistoryRecorder:
        """This process's per-minute counts, written to the store every few seconds
        (deferq.history): what it enqueues here, what its workers settle."""
        return self._history.recorder

    def _sealer(self) -> Sealer | None:
        return self.registry.chain.sealer

    @property
    def encryption(self) -> Encryption | None:
        """The App's encryption at rest (None: it encrypts nothing)."""
        sealer = self.registry.chain.sealer
        return None if sealer is None else sealer.encryption

    def use_encryption(self, encryption: Encryption) -> None:
        """Encrypt as `encryption` says from now on (its keys replace any given before):
        the command line gives an App the keys of DEFERQ_ENCRYPTION_KEYS this way."""
        if not isinstance(encryption, Encryption):
            raise ConfigError(f"encryption= takes a deferq.Encryption, got {encryption!r:.60}")
        self.registry.chain.sealer = Sealer(encryption, self.registry.tasks)

    def close(self) -> None:
        self._history.close()
        self.runtime.close()

    # -- tasks -------------------------------------------------------------------

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        chunk: Chunk,
        name: str | None = None,
        on_success: Hook | None = None,
        on_failure: Hook | None = None,
        **defaults: Unpack[TaskOptions],
    ) -> Callable[[Callable[[list[Item]], Any]], ChunkTask[Item]]: ...

    @overload
    def task(
        self,
        fn: Callable[P, R],
        /,
        *,
        chunk: None = None,
        name: str | None = None,
        on_success: Hook | None = None,
        on_failure: Hook | None = None,
        **defaults: Unpack[TaskOptions],
    ) -> Task[P, R]: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        chunk: None = None,
        name: str | None = None,
        on_success: Hook | None = None,
        on_failure: Hook | None = None,
        **defaults: Unpack[TaskOptions],
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        chunk: Chunk | None = None,
        name: str | None = None,
        on_success: Hook | None = None,
        on_failure: Hook | None = None,
        **defaults: Unpack[TaskOptions],
    ) -> Any:
        """Register a function (sync or async) as a task: ``@app.task(queue="email")``.

        `defaults` are the fields of `deferq.options.TaskDefaults` (typed by
        `deferq.options.TaskOptions`). `chunk=deferq.Chunk(size=..., wait=...)` makes a
        chunk task (deferq.chunks): its function takes a list, and each job is one item."""
        try:
            task_defaults = TaskDefaults.parse(**defaults)
            if chunk is not None:
                chunk_option(chunk)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

        def register(func: Callable[..., Any]) -> Task[..., Any]:
            if name is None and getattr(func, "__name__", None) == "<lambda>":
                raise ConfigError(
                    "a task needs a named module-level function the worker can import: define it with "
                    "def at the top of a module (or give the lambda a name=)"
                )
            kind = Task if chunk is None else ChunkTask
            task = kind(self, func, name or func.__name__, task_defaults, on_success, on_failure,
                        explicit=frozenset(defaults), chunk=chunk)
            if task_defaults.encrypt and self.registry.chain.sealer is None:  # keys: the App's, given later
                self.use_encryption(Encryption(every_task=False))
            try:
                self.registry.add_task(task)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            return task

        return register(fn) if fn is not None else register

    def fair_queue(self, queue: str, *, key: str, weights: Mapping[str, float] | None = None) -> FairQueue:
        """Make `queue` a fair queue: ``app.fair_queue("reports", key="customer:{customer_id}")``.
        Every job this App stores on it gets a fair key (docs/flow-control.md, Fair queues):
        its own `options(fair_key=...)` first, else its task's `fair_key`, else `key`
        filled from the call's arguments. `weights` ({key: weight}) give keys their share
        where neither the job nor its task chose a `fair_weight`. Refused (ConfigError)
        when a task declared on the queue has no parameter a field of `key` names and no
        fair_key of its own, whichever of the two is declared first."""
        try:
            fair = FairQueue.parse(queue, key, weights)
            self.registry.add_fair_queue(fair)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return fair

    def on(self, event: str) -> Callable[[Hook], Hook]:
        """Register an app-wide hook: ``@app.on("dead") def alert(job, error): ...``."""
        if event not in EVENTS:
            raise ValueError(f"unknown event {event!r}: events are {', '.join(EVENTS)}")

        def register(fn: Hook) -> Hook:
            self.registry.add_hook(event, fn)
            return fn

        return register

    def add_middleware(self, middleware: Middleware) -> None:
        """Run `middleware`'s hooks around every job of this app (see deferq.middleware)."""
        self.registry.add_middleware(middleware)

    def queues_in_use(self) -> tuple[str, ...]:
        """The queues a worker without `--queue` consumes: those its tasks name, and those its
        schedules declared in code name (a schedule may send its task's jobs elsewhere)."""
        named = {task.defaults.queue for task in self.tasks.values()}
        named.update(str(job.options["queue"]) for job in self.periodic_jobs if job.options.get("queue"))
        return tuple(sorted(named))

    def periodic(
        self,
        cron: str | None = None,
        *,
        name: str | None = None,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: dict[str, Any] | None = None,
        every: Seconds | None = None,
        tz: str | None = None,
        jitter: Seconds = 0.0,
        missed: Literal["skip", "latest", "all"] = "skip",
        **options: Unpack[PeriodicOptions],
    ) -> Callable[[Callable[P, R]], Task[P, R]]:
        """Enqueue a task on a schedule, fired by any worker (docs/schedules.md):
        ``@app.periodic("0 9 * * 1-5", tz="Europe/Berlin", queue="reports")`` or
        ``@app.periodic(every=timedelta(seconds=30))``. `options` are the job options a
        schedule's jobs may set (`deferq.options.PeriodicOptions`)."""
        from .schedules.definition import register_periodic

        return register_periodic(self, cron, name=name, args=args, kwargs=kwargs, every=every, tz=tz,
                                 jitter=jitter, missed=missed, **options)

    @property
    def schedules(self) -> Schedules:
        """The store's schedules, managed at run time: ``app.schedules.add(name,
        task.call(...), cron=..., tz=...)``, ``.pause(name)``, ``.remove(name)`` (schedules/store.py)."""
        from .schedules.store import Schedules

        return Schedules(self)

    # -- producing ---------------------------------------------------------------

    def enqueue(
        self,
        task: str,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Unpack[JobOptionsKw],
    ) -> Job:
        """Enqueue by task name (the task need not be importable here)."""
        call = Call(task, tuple(args), dict(kwargs or {}), JobOptions.parse(**options))
        return self.runtime.enqueue_many([call])[0]

    def enqueue_many(self, calls: Iterable[Call]) -> list[Job]:
        """Store many jobs in one round trip."""
        return self.runtime.enqueue_many(calls)

    async def enqueue_many_async(self, calls: Iterable[Call]) -> list[Job]:
        return await self.runtime.enqueue_many_async(calls)


    # -- inspecting and managing -------------------------------------------------

    def with_inputs(self, job: Job) -> Job:
        """A leased job as its task is called: a workflow step's parents' results in
        front of its arguments, a batch callback's summary (read from the store now)."""
        return with_inputs(self.backend, job) if job.meta else job

    def get(self, job_id: str) -> Job | None:
        """The job as stored now (its `wait()` waits on this App's store), or None."""
        return self._held(self.backend.get(job_id)) if storable(job_id) else None

    def get_by_key(self, key: str) -> Job | None:
        return self._held(self.backend.get_by_key(key)) if storable(key) else None

    def _held(self, job: Job | None) -> Job | None:
        return None if job is None else self.runtime.held([job])[0]

    def cancel(self, job_id: str) -> bool:
        """Cancel a waiting job, or ask a running one to stop; its unfinished child jobs
        (`job.gather`) are cancelled too, and a waiting durable job whose undo handlers have
        not run is queued again to run them, then ends cancelled. False when it is
        finished or unknown."""
        if not (storable(job_id) and self.backend.cancel(job_id)):
            return False
        after_cancelled(self.backend, job_id)
        return True

    def batch(self, on_complete: Call | None = None, on_success: Call | None = None) -> batches.Batch:
        """A batch: ``with app.batch(on_complete=report.call()) as b: ...`` (see batch.py)."""
        return batches.Batch(self, on_complete, on_success, self._batch_join)

    def get_batch(self, batch_id: str) -> batches.BatchInfo | None:
        """A closed batch's counts (total, pending, succeeded, dead, state), or None."""
        return batches.info(self.backend, batch_id)

    def dependencies(self, job: Job) -> dict[str, list[str]]:
        """{"after": the jobs it runs after (as enqueued), "waiting": the jobs still
        waiting for it}."""
        return {"after": list(job.meta.get(AFTER, ())), "waiting": self.backend.dependents(job.id)}

    def send_event(self, event: str, key: str, data: Any = None,
                   keep: float | timedelta = step_events.EVENT_KEEP) -> int:
        """Wake every job waiting in `job.wait_for(..., event=event, key=key)` with `data`
        (JSON), and keep the event `keep` seconds (a week) for jobs that wait for it later.
        Returns how many waiting jobs it woke (docs/steps.md)."""
        return step_events.send_event(self.backend, event, key, data, keep, self.registry.chain.sealer)

    async def send_event_async(self, event: str, key: str, data: Any = None,
                               keep: float | timedelta = step_events.EVENT_KEEP) -> int:
        return await asyncio.to_thread(self.send_event, event, key, data, keep)

    def events(self) -> list[dict[str, Any]]:
        """The events kept for jobs that wait for them later (`send_event`'s `keep`),
        newest first: event, key, id, when it was sent (`at`), its data, the data's `size`
        (bytes of JSON) and how many waiting jobs it `woke` when it was sent."""
        return step_events.kept_events(self.backend, self.registry.chain.sealer)

    def steps(self, job_id: str) -> list[dict[str, Any]]:
        """A job's durable steps, sleeps and waits in the order it reached them, each with
        its state, when it started and its result (or what it waits for)."""
        return step_events.timeline(self.backend, job_id, self.registry.chain.sealer)

    def children(self, job_id: str) -> list[dict[str, Any]]:
        """A job's child jobs (`job.gather`, `job.run_child`), gather by gather in order: each
        with its gather's name (`step`), its place (`index`), id, task, state, and its
        result or error once it ended."""
        return child_jobs.children(self.backend, job_id, self._sealer()) if storable(job_id) else []

    def wait(self, job_id: str, timeout: float | None = None) -> Any:
        """The result of a job once it has finished (see `Job.wait`)."""
        return results.wait(self, job_id, timeout)

    async def wait_async(self, job_id: str, timeout: float | None = None) -> Any:
        return await results.wait_async(self, job_id, timeout)

    def retry_dead(self, job_id: str) -> bool:
        return self.backend.retry_dead(job_id)

    def retry_from(self, job_id: str, step: str) -> Job:
        """Run a dead, cancelled or succeeded durable job again from its step (or sleep,
        or wait) `step`: the checkpoints from it on are dropped, the earlier ones kept.
        Returns the job as queued; raises `deferq.steps.retry.RetryRefused` (nothing
        changed) for an unknown job or step, or a job not finished (docs/steps.md)."""
        from .steps import retry as step_retry

        if not storable(job_id):
            raise step_retry.RetryRefused(f"there is no job {job_id!r:.60}", "unknown job")
        return self.runtime.held([step_retry.retry_from(self.backend, job_id, step)])[0]

    def steps_check(self) -> step_check.Report:
        """Replay every unfinished or dead durable job against the code loaded now,
        without running any step's function, and name each job it would end dead or
        replay wrongly, with the step and why (docs/steps.md, "Safe deploys")."""
        from .steps import check as step_check

        return step_check.steps_check(self.backend, step_check.Code(self.registry.spec_for, self.with_inputs))

    def run_now(self, job_id: str) -> bool:
        """Make a scheduled job (delayed, or waiting to be retried) due now; False if it
        is not scheduled."""
        return self.backend.run_now(job_id)

    def set_remark(self, job_id: str, remark: str | None) -> bool:
        """Set (None: clear) a job's free-text remark; False if there is no such job."""
        return self.backend.set_remark(job_id, None if remark is None else _checked(remark_text, remark))

    def pause(self, queue: str) -> bool:
        """Stop workers taking jobs of `queue` until `resume`: enqueues still go in, jobs
        already running finish, and the pause is kept in the store (it outlives restarts).
        False if it was paused already."""
        return self.backend.pause(_checked(queue_name, queue))

    def resume(self, queue: str) -> bool:
        """Let workers take jobs of a paused queue again; False if it was not paused."""
        return self.backend.resume(_checked(queue_name, queue))

    def paused(self) -> dict[str, float]:
        """The paused queues, each with when it was paused (epoch seconds)."""
        return self.backend.paused()

    def stats(self) -> QueueTable:
        """Per queue: counts by state, the oldest due job's wait in seconds, and whether
        it is paused (a paused queue without jobs is listed too). Its `missing` names
        the parts of the store that did not answer (Redis shards, as host:port/db),
        whose jobs the counts leave out; [] when the whole store answered."""
        raw = queue_table(self.backend)
        return QueueTable({queue: s.to_dict() for queue, s in sorted(raw.items())}, missing_from(raw))

    def queue_stats(self) -> dict[str, QueueStats]:
        return self.backend.stats()

    def list_jobs(self, state: str | JobState, queue: str | None = None, limit: int = 100) -> list[Job]:
        return self.runtime.held(self.backend.list_jobs(JobState(state), queue, limit))

    def find_jobs(self, *, state: str | JobState | None = None, queue: str | None = None, task: str | None = None,
                  tag: str | None = None, chunk: str | None = None, text: str = "", limit: int = 50,
                  cursor: str | None = None) -> JobPage:
        """A page of the jobs that match every filter given, newest first; `page.cursor`
        asks for the next (backends/search.py: what each store looks at to answer).
        `state` may also be `retrying` (scheduled jobs that failed before) or `waiting`
        (scheduled jobs in a durable wait); `chunk`, a chunk call's id (`job.chunk_call`),
        finds the jobs that call ran."""
        kind = str(state) if state in SCHEDULED_KINDS else None
        find = JobQuery(None if state is None or kind else JobState(state), queue, task, tag, chunk, text, cursor,
                        limit)
        page = find_scheduled(self.backend, find, kind) if kind else self.backend.find_jobs(find)
        page.jobs = self.runtime.held(page.jobs)
        return page

    def purge(self, states: Iterable[str | JobState] = (JobState.DEAD,), older_than: float = 0) -> int:
        return self.backend.purge([JobState(s) for s in states], older_than)

    def __repr__(self) -> str:
        return f"<deferq.App {self.url} tasks={len(self.tasks)}>"

    def use_url(self, url: str) -> None:
        """Point the App at another store before its first use: a command's --url (or a
        config file's url) wins over the URL written in the code. Refused once the store
        is open, since the jobs would then go to two stores."""
        if url == self.url:
            return
        if self.runtime.store is not None:
            raise ConfigError(f"the App's store {self.url} is already open: {url} cannot replace it now")
        if self.eager and not url.startswith("memory:"):
            raise ConfigError("eager mode runs on memory:// only (it is for unit tests)")
        check_options(url)
        self.url = url
