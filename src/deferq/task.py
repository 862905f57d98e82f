"""Tasks and the producer side: turning a call into a stored job."""

from __future__ import annotations

import asyncio
import gc
import inspect
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, Unpack, overload

from .backends import open_backend
from .backends.base import Backend, Enqueue, OnConflict, make_enqueue
from .chunks import Chunk, codec_of
from .codec import ArgsCodec, unknown_task_codec
from .job import Job, JobState, Origin, encode_payload, fresh_job, held, new_job_id, new_job_ids, slot_init
from .middleware import Chain
from .options import JobOptions, JobOptionsKw, TaskDefaults, conflict_rules, unique_key, window_rules
from .values import filled

Hook = Callable[..., Any]
P = ParamSpec("P")
Rest = ParamSpec("Rest")  # a task's parameters after its first
R = TypeVar("R", covariant=True)  # covariant: an async task (any coroutine) matches Coroutine[..., T]
T = TypeVar("T")
if TYPE_CHECKING:  # a bare `Call` is a Call[Any] (TypeVar's default is Python 3.13's)
    from typing_extensions import TypeVar as DefaultedTypeVar

    T_co = DefaultedTypeVar("T_co", covariant=True, default=Any)
else:
    T_co = TypeVar("T_co", covariant=True)
Reg = TypeVar("Reg", covariant=True)
Item = TypeVar("Item")  # an item of a chunk task's list


_NO_CALL = object()  # Runtime.prepare's connection before the first call
# A batch this big makes ~7 objects a job that all live until it returns: the cyclic
# garbage collector would walk them several times over, for nothing (~2 µs a job, a
# fifth of a batch's time on Redis). Collection waits until the batch is stored.
_BIG_BATCH = 100


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    if not gc.isenabled():  # the caller's own choice: left as it is
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Runtime(Generic[Reg]):
    """What runs under a `deferq.App`, for the floors below it: its registry (`Reg`, the
    tasks and the middleware chain), its store (opened on first use), its settings and the
    enqueue pipeline (the chain around the store call). The App owns one and forwards to
    it; a Worker, the workflows, batches, schedules and deferq.testing take it (from an
    App, `app.runtime`; a Runtime's `runtime` is itself)."""

    def __init__(self, url: str, registry: Reg, chain: Chain, tasks: dict[str, Task[..., Any]],
                 fair_queues: dict[str, FairKeys], *, lease: float, result_ttl: float,
                 priority_weights: tuple[int, int, int], durable: bool, eager: bool,
                 backend_options: dict[str, Any]) -> None:
        self.url, self.registry, self.chain = url, registry, chain
        self.tasks, self.fair_queues = tasks, fair_queues  # the registry's: declared by the App
        self.lease, self.result_ttl, self.priority_weights = lease, result_ttl, priority_weights
        self.durable, self.eager, self.backend_options = durable, eager, backend_options
        self.periodic_jobs: list[Any] = []  # the App's, filled by app.periodic; written to the store at start
        self.store: Backend | None = None  # opened on first use (`backend`)
        self.origin: Origin | None = None  # what the jobs it returns wait through (the App's)
        self._lock = threading.Lock()

    @property
    def runtime(self) -> Runtime[Reg]:
        return self

    @property
    def backend(self) -> Backend:
        """The store, opened on first use (so importing a tasks module costs nothing)."""
        if self.store is None:
            with self._lock:
                if self.store is None:
                    self.store = open_backend(self.url, **self.backend_options)
        return self.store

    def use_store(self, store: Backend | None) -> Backend | None:
        """Put `store` in place of the one in use (None: open the URL's at the next use);
        returns the one it replaced (deferq.testing.isolated)."""
        with self._lock:
            replaced, self.store = self.store, store
        return replaced

    def close(self) -> None:
        replaced = self.use_store(None)
        if replaced is not None:
            replaced.close()

    def prepare(self, calls: Iterable[Call]) -> tuple[list[Enqueue], Any]:
        """Validate calls into stored form, and find the caller's connection, if any."""
        calls = calls if type(calls) is list else list(calls)
        if len(calls) == 1 and isinstance(call := calls[0], Call):  # task.enqueue(): the commonest call
            task = self.tasks.get(call.task)
            return [build_enqueue(call, task, 0.0, self.durable, None, self.fair_queues)], call.options.connection
        items: list[Enqueue] = []
        tasks, durable, add, fair_queues = self.tasks, self.durable, items.append, self.fair_queues
        connection: Any = _NO_CALL
        options, name, build = None, None, None  # a run of calls alike shares a builder from its second
        for call, job_id in zip(calls, new_job_ids(len(calls)), strict=True):  # the ids made at once: cheaper
            if not isinstance(call, Call):
                raise TypeError(f"enqueue_many takes task.call(...) values, got {call!r:.60}")
            if call.options is options and call.task == name:
                if build is None:
                    build = enqueue_builder(call, tasks.get(name), durable, fair_queues)
                add(build(call, job_id))
                continue
            options, name, build = call.options, call.task, None
            if options.connection is not connection:
                if connection is not _NO_CALL:
                    raise ValueError("all jobs of one enqueue_many must use the same connection")
                connection = options.connection
            add(build_enqueue(call, tasks.get(name), 0.0, durable, job_id, fair_queues))
        return items, (None if connection is _NO_CALL else connection)

    def enqueue_many(self, calls: Iterable[Call]) -> list[Job]:
        """Store many calls in one round trip (`app.enqueue_many`)."""
        if type(calls) is not list or len(calls) < _BIG_BATCH:
            return self.enqueue_items(*self.prepare(calls))
        with _no_cycle_collection():
            return self.enqueue_items(*self.prepare(calls))

    async def enqueue_many_async(self, calls: Iterable[Call]) -> list[Job]:
        return await self.enqueue_items_async(*self.prepare(calls))

    def enqueue_items(self, items: list[Enqueue], connection: Any = None) -> list[Job]:
        """Store jobs in their stored form through the middleware chain (Chain.enqueue), in
        the caller's transaction if `connection` is one; the jobs as stored."""
        if not items:
            return []
        store = self.backend.enqueue_many  # bound: the chain calls the store itself
        if connection is not None:
            store = partial(store, connection=connection)
        return self.held(self.chain.enqueue(items, store))

    async def enqueue_items_async(self, items: list[Enqueue], connection: Any = None) -> list[Job]:
        if not items:
            return []
        if self.eager:  # runs the jobs: not on the caller's event loop
            return await asyncio.to_thread(self.enqueue_items, items, connection)
        backend = self.backend
        return self.held(await self.chain.enqueue_async(
            items, lambda stored: backend.enqueue_many_async(stored, connection)))

    def held(self, jobs: list[Job]) -> list[Job]:
        """`jobs`, each knowing the App they came from (`Job.wait`), opened as far as
        this process can when the App encrypts (encryption/jobs.py)."""
        sealer = self.chain.sealer
        if sealer is not None:  # in place: a store's list may say more (JobList.missing)
            for i, job in enumerate(jobs):
                jobs[i] = sealer.open_job(job)
        return jobs if self.origin is None else held(jobs, self.origin)


class AppLike(Protocol[Reg]):
    """A `deferq.App` as the floors below it use it: its tasks and registry, its public
    API, and its `runtime` (the store, the settings, the enqueue pipeline). Tasks, waiting,
    workflows, batches, schedules and the testing helpers take their App as this; the App
    itself lives above them. A `Runtime` is one too.

    Generic in the registry's type (`AppLike[Registry]`), which is defined above this
    module; who needs no registry takes an `AppLike[object]`."""

    tasks: dict[str, Task[..., Any]]
    fair_queues: dict[str, FairKeys]  # app.fair_queue's declarations, by queue
    lease: float
    result_ttl: float
    periodic_jobs: list[Any]

    @property
    def runtime(self) -> Runtime[Reg]: ...

    @property
    def backend(self) -> Backend: ...

    @property
    def registry(self) -> Reg: ...

    def task(self, fn: Callable[..., Any], /) -> Any: ...

    def get(self, job_id: str) -> Job | None: ...

    def cancel(self, job_id: str) -> bool: ...

    def enqueue_many(self, calls: Iterable[Call]) -> list[Job]: ...

    async def enqueue_many_async(self, calls: Iterable[Call]) -> list[Job]: ...


class _Base:
    """An empty first base: slot_init's faster __init__ needs one other than Generic."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Call(_Base, Generic[T_co]):
    """A task call not yet stored; `app.enqueue_many([t.call(...), ...])` stores many.
    `T_co` is the task's result type (what a workflow step after it receives).

    `source`: the Task that made it (`task.call(...)`), whose App a workflow of calls
    is stored in; None for a call made by hand. Not compared."""

    task: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    options: JobOptions = field(default_factory=JobOptions)
    source: Task[..., Any] | None = field(default=None, compare=False, repr=False)

    if TYPE_CHECKING:  # for type checkers only: what a workflow ending with this call gives
        @property
        def _result(self) -> T_co: ...


_make_call: Callable[..., Call[Any]] = slot_init(Call)  # one per job a producer enqueues (make: quicker)


class Task(Generic[P, R]):
    """A registered function. Call it directly to run it here; `.enqueue` to defer it.

    Generic over the function's parameters and return type, so a type checker holds
    `enqueue(...)`, `call(...)` and `enqueue_async(...)` to the function's signature.
    """

    def __init__(
        self,
        app: AppLike[object],
        fn: Callable[P, R],
        name: str,
        defaults: TaskDefaults,
        on_success: Hook | None = None,
        on_failure: Hook | None = None,
        options: JobOptions | None = None,
        explicit: frozenset[str] = frozenset(),
        chunk: Chunk | None = None,
    ) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.defaults = defaults
        # the TaskDefaults fields `@app.task(...)` was given; the rest are deferq's defaults,
        # which a worker's own defaults (`deferq worker --tries/--delay`) may replace
        self.explicit = explicit
        self.is_async = inspect.iscoroutinefunction(fn)
        self.on_success = on_success
        self.on_failure = on_failure
        self.chunk = chunk  # a chunk task's (ChunkTask): its jobs are items of one call's list
        self._options = options or JobOptions()
        self._rules: _Rules | None = None  # build_enqueue's resolution of _options, made once
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.defaults.queue}>"

    def options(self, **options: Unpack[JobOptionsKw]) -> Task[P, R]:
        """This task with per-job options (the fields of `deferq.options.JobOptions`)."""
        merged = self._options.merged(JobOptions.parse(**options))
        return type(self)(
            self.app, self.fn, self.name, self.defaults, self.on_success, self.on_failure, merged,
            self.explicit, self.chunk,
        )

    @overload
    def call(self: Task[P, Coroutine[Any, Any, T]], *args: P.args, **kwargs: P.kwargs) -> Call[T]: ...

    @overload
    def call(self: Task[P, T], *args: P.args, **kwargs: P.kwargs) -> Call[T]: ...

    def call(self, *args: P.args, **kwargs: P.kwargs) -> Call[Any]:
        return _make_call(self.name, args, kwargs, self._options, self)

    # A workflow step after another: the step before gives the first argument.
    @overload
    def partial(self: Task[Concatenate[Any, Rest], Coroutine[Any, Any, T]], *args: Rest.args,
                **kwargs: Rest.kwargs) -> Call[T]: ...

    @overload
    def partial(self: Task[Concatenate[Any, Rest], T], *args: Rest.args, **kwargs: Rest.kwargs) -> Call[T]: ...

    def partial(self, *args: Any, **kwargs: Any) -> Call[Any]:
        """A call without its first argument, for a step of `chain` or `chord` whose step
        before passes its result as that argument (`resize.partial(width=800)`): the
        same as `call` at run time; a type checker holds the rest to the signature."""
        return _make_call(self.name, args, kwargs, self._options, self)

    # The job's type is its result's: an async task's job gives what its coroutine returns.
    @overload
    def enqueue(self: Task[P, Coroutine[Any, Any, T]], *args: P.args, **kwargs: P.kwargs) -> Job[T]: ...

    @overload
    def enqueue(self: Task[P, T], *args: P.args, **kwargs: P.kwargs) -> Job[T]: ...

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job[Any]:
        """Store a job of this task in its App's store; the job's `wait()` gives the
        task's result."""
        return self.app.runtime.enqueue_many([self.call(*args, **kwargs)])[0]

    @overload
    async def enqueue_async(
        self: Task[P, Coroutine[Any, Any, T]], *args: P.args, **kwargs: P.kwargs
    ) -> Job[T]: ...

    @overload
    async def enqueue_async(self: Task[P, T], *args: P.args, **kwargs: P.kwargs) -> Job[T]: ...

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> Job[Any]:
        return (await self.app.runtime.enqueue_many_async([self.call(*args, **kwargs)]))[0]


class ChunkTask(Task[[Item], Any]):
    """A chunk task (`@app.task(chunk=deferq.Chunk(...))`): its function takes a list,
    and each job is one item of it (`index.enqueue(7)`, typed as the item). Calling it
    directly runs the function with a list, here."""

    def __call__(self, items: list[Item], /) -> Any:  # type: ignore[override]
        call: Callable[[list[Item]], Any] = self.fn  # type: ignore[assignment]
        return call(items)


class FairKeys(Protocol):
    """A fair queue as the producer and the registry use it: `deferq.limits.fair.FairQueue`,
    declared by `app.fair_queue(name, key=..., weights=...)`."""

    @property
    def name(self) -> str: ...

    @property
    def key(self) -> str: ...  # the key template

    def refusal(self, task: Task[..., Any]) -> str | None:
        """Why `task`'s jobs cannot be keyed by this queue's template, or None."""

    def key_of(self, task: Task[..., Any] | None, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The fair key of one call on this queue; ValueError (one sentence) when the call
        cannot fill the template."""

    def weight_of(self, key: str, weight: float) -> float:
        """The weight of `key`'s jobs that chose none (`weight`: the task's)."""


@dataclass(frozen=True, slots=True)
class _Rules:
    """What a call's options and its task's defaults make of every job they enqueue:
    resolved once per (task, options), not once per job."""

    codec: ArgsCodec
    queue: str
    priority: int
    max_attempts: int
    timeout: float | None
    key: str | None
    run_at: float
    expires_at: float | None
    delay: float
    within: float | None
    on_conflict: OnConflict
    max_wait: float | None
    unique_for: float | None
    durable: bool | None
    remark: str | None
    tags: tuple[str, ...]
    fair_key: str | None  # the call's own key, else the task's template (filled per call)
    fair_template: bool  # fair_key is the task's template
    fair_weight: float
    fair_weight_chosen: bool  # by the call or the task: a fair queue's weights do not replace it
    signature: inspect.Signature | None

    @classmethod
    def of(cls, opts: JobOptions, task: Task[..., Any] | None, name: str) -> _Rules:
        codec = codec_of(task.fn, task.name, task.chunk) if task is not None else unknown_task_codec(name)
        known = task is not None
        defaults = task.defaults if task is not None else TaskDefaults()
        return cls(
            codec, opts.queue or defaults.queue, defaults.priority if opts.priority is None else opts.priority,
            opts.max_attempts or defaults.max_attempts,
            opts.timeout if opts.timeout is not None or not known else defaults.timeout, opts.key,
            opts.at or 0.0, opts.expires.at if opts.expires else None, opts.delay,
            opts.expires.within if opts.expires else None,
            conflict_rules(opts.on_conflict, opts.key, opts.max_wait), opts.max_wait,
            window_rules(opts.unique_for, opts.key), opts.durable,
            opts.remark, defaults.tags if opts.tags is None else opts.tags,
            opts.fair_key or defaults.fair_key, opts.fair_key is None and defaults.fair_key is not None,
            defaults.fair_weight if opts.fair_weight is None else opts.fair_weight,
            opts.fair_weight is not None or (task is not None and "fair_weight" in task.explicit),
            inspect.signature(task.fn) if task is not None and defaults.fair_key is not None else None,
        )

    def fair_key_of(self, task: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        if not self.fair_template or self.fair_key is None or self.signature is None:
            return self.fair_key
        return unique_key(filled(self.fair_key, self.signature, task, args, kwargs, "the fair key"), "fair_key")


def _rules_of(call: Call, task: Task[..., Any] | None) -> _Rules:
    """`call`'s rules (`task`: the producer's task of its name), kept on the Task whose
    own options the call carries: `task` itself, or the `task.options(...)` copy of it
    that made the call (the same function and defaults), so that a loop of
    `task.options(...).enqueue()` resolves them once."""
    opts = call.options
    holder = task if task is not None and opts is task._options else call.source
    if (task is None or holder is None or holder._options is not opts or holder.fn is not task.fn
            or holder.defaults is not task.defaults or holder.explicit is not task.explicit):
        return _Rules.of(opts, task, call.task)
    rules = holder._rules
    if rules is None:
        rules = holder._rules = _Rules.of(opts, task, call.task)
    return rules


def build_enqueue(
    call: Call, task: Task[..., Any] | None, now: float, durable: bool = True, job_id: str | None = None,
    fair_queues: Mapping[str, FairKeys] | None = None,
) -> Enqueue:
    """The stored form of a call: task defaults overridden by the call's options, its
    arguments encoded exactly (codec.py) or refused.

    `task` is None when the producer does not know the task (enqueue by name): then
    the timeout is left to the worker's task definition. `durable` is the App's
    default for calls that do not say (options.durable). `job_id`: one of a batch's
    ids (job.new_job_ids), else a new one. `fair_queues`: the App's fair queues, whose
    key a job on one of them gets when neither it nor its task has one.
    """
    opts = call.options
    rules = _rules_of(call, task)
    args, kwargs = rules.codec.encode(call.args, call.kwargs)
    fair_key, weight = rules.fair_key_of(call.task, args, kwargs) if rules.fair_key else None, rules.fair_weight
    if fair_queues and (fair := fair_queues.get(rules.queue)) is not None:
        fair_key = fair_key or fair.key_of(task, call.task, args, kwargs)
        weight = weight if rules.fair_weight_chosen else fair.weight_of(fair_key, weight)
    job = fresh_job(
        job_id or new_job_id(), call.task, args, kwargs, rules.queue, rules.priority, JobState.QUEUED,
        rules.max_attempts, rules.timeout, rules.key, rules.run_at, now, {}, rules.expires_at, None, rules.remark,
        rules.tags, fair_key,
    )
    payload = encode_payload(call.task, args, kwargs)
    item = make_enqueue(job, rules.delay, payload, rules.within, rules.on_conflict, rules.max_wait,
                        durable if rules.durable is None else rules.durable, (), False, rules.unique_for,
                        weight)
    return linked(item, opts.after, opts.after_any_outcome) if opts.after else item


def enqueue_builder(
    call: Call, task: Task[..., Any] | None, durable: bool, fair_queues: Mapping[str, FairKeys] | None,
) -> Callable[[Call, str], Enqueue]:
    """build_enqueue (`now` 0) for a batch's run of calls like `call` (the same task name
    and options), with what they share resolved once: ~0.4 µs a job quicker. Calls
    with a fair key or parents go through build_enqueue."""
    rules = _rules_of(call, task)
    if call.options.after or rules.fair_key is not None or (fair_queues and rules.queue in fair_queues):
        return lambda call, job_id: build_enqueue(call, task, 0.0, durable, job_id, fair_queues)
    encode, queued = rules.codec.encode, JobState.QUEUED
    queue, priority, max_attempts, timeout, key = (
        rules.queue, rules.priority, rules.max_attempts, rules.timeout, rules.key)
    run_at, expires_at, remark, tags, delay = rules.run_at, rules.expires_at, rules.remark, rules.tags, rules.delay
    within, on_conflict, max_wait, unique_for, weight = (
        rules.within, rules.on_conflict, rules.max_wait, rules.unique_for, rules.fair_weight)
    durable = durable if rules.durable is None else rules.durable

    def build(call: Call, job_id: str) -> Enqueue:
        name = call.task
        args, kwargs = encode(call.args, call.kwargs)
        job = fresh_job(job_id, name, args, kwargs, queue, priority, queued, max_attempts, timeout, key, run_at,
                        0.0, {}, expires_at, None, remark, tags, None)
        return make_enqueue(job, delay, encode_payload(name, args, kwargs), within, on_conflict, max_wait,
                            durable, (), False, unique_for, weight)
    return build


AFTER = "deferq.after"  # meta: the ids a job runs after, for `deferq job` and the API
SHOWN_PARENTS = 100  # a batch callback after 100,000 members records the first ones


# meta: the ids of the jobs enqueued with this one to run after it (a chain's next step, a
# chord's callback). The store forgets an edge once it settles, so this is how the job page
# still shows a finished job's children; a job added later with after= is not in it.
CHILDREN = "deferq.children"
SHOWN_CHILDREN = 100


def with_meta(item: Enqueue, **meta: Any) -> Enqueue:
    """`item` with more meta (its payload, which carries the meta, made anew)."""
    job = item.job.evolve(meta={**item.job.meta, **meta})
    return replace(item, job=job, payload=encode_payload(job.task, job.args, job.kwargs, job.meta))


def linked(item: Enqueue, after: Sequence[str], after_any: bool, **meta: Any) -> Enqueue:
    """`item` to run after the jobs `after` (backends/deps.py), its meta naming them
    (and carrying `meta`)."""
    job = item.job
    if job.key is not None:
        raise ValueError("a job that runs after others cannot have a unique key")
    parents = (*item.after, *after)
    meta = {**job.meta, **meta, AFTER: list(parents[:SHOWN_PARENTS])}
    job = job.evolve(meta=meta)
    payload = encode_payload(job.task, job.args, job.kwargs, meta)
    return replace(item, job=job, payload=payload, after=parents, after_any=after_any or item.after_any)
