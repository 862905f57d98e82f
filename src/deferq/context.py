"""The job whose task runs in this context: `deferq.current_job()`.

A context variable, so each runner thread and each asyncio task sees its own job.
What it holds is a `RunningJob`: the Job's attributes (id, attempts, args, ...), and
what a task may say to or hear from its worker while it runs: `progress(...)`,
`cancel_requested`, its concurrency slot's `slot_fence` and `holds_slot()`, and its
durable steps (`step`, `sleep`, `wait_for`, child jobs with `gather`: steps/ keeps them in the store).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ParamSpec, Protocol, TypeVar, overload

from . import backoff as backoffs
from .errors import ConfigError
from .job import Job
from .values import MAX_DELAY

P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Slot(Protocol):
    """What a run knows of the concurrency slot it took (limits/slots.py HeldSlot)."""

    fence: int

    def held(self) -> bool: ...

    def report_lost(self, job: Job, when: str) -> None: ...


@dataclass(frozen=True)
class StepRetry:
    """Retries of one step of its own (`job.step_with_retry`), apart from the task's: up to
    `max_attempts` tries in all, `backoff(failures)` seconds apart, for errors of the types
    in `retry_on`. Between tries the job leaves the worker, as in a sleep (not counted as
    an attempt of the job); the steps before it are not redone. When the tries are used up,
    the step's last error fails the run, and the task's own retries take over (each run
    of the task gives the step `max_attempts` tries again)."""

    max_attempts: int = 3
    backoff: Callable[[int], float] = field(default_factory=lambda: backoffs.exponential(first=1.0, cap=60.0))
    retry_on: tuple[type[BaseException], ...] = (Exception,)

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ConfigError(f"StepRetry max_attempts must be a whole number, 1 or more, "
                              f"got {self.max_attempts!r}")
        if not callable(self.backoff):
            raise ConfigError("StepRetry backoff must be a deferq.backoff policy (attempt -> seconds)")
        kinds = self.retry_on if isinstance(self.retry_on, tuple) else (self.retry_on,)
        if not kinds or not all(isinstance(k, type) and issubclass(k, BaseException) for k in kinds):
            raise ConfigError("StepRetry retry_on must be exception classes, e.g. (TimeoutError, OSError)")
        object.__setattr__(self, "retry_on", kinds)


class Checkpoints(Protocol):
    """A running job's durable steps, kept in the store (steps.checkpoints.JobSteps)."""

    def start(self, name: str, fn: Callable[..., Any]) -> dict[str, Any] | None: ...

    def now(self) -> float: ...

    def kept(self, name: str, fn: Callable[..., Any], result: Any, started: float) -> Any: ...

    def step(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
             retry: StepRetry | None = None) -> Any: ...

    def failed(self, name: str, retry: StepRetry | None, exc: Exception) -> None: ...

    def step_within(self, connection: Any, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> Any: ...

    def sleep(self, name: str, delay: float | None = None, until: float | None = None) -> None: ...

    def wait_for(self, name: str, event: str, key: str, timeout: float) -> Any: ...

    def patched(self, name: str) -> bool: ...

    def step_with_undo(self, name: str, undo: Callable[[Any], Any], fn: Callable[..., Any],
                       args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...

    def kept_with_undo(self, name: str, fn: Callable[..., Any], undo: Callable[[Any], Any], result: Any,
                       started: float) -> Any: ...

    def undo_on(self, name: str, undo: Callable[[Any], Any]) -> None: ...

    def ended(self, outcome: Any) -> Any: ...  # the run's Outcome (a floor up), saying if its checkpoints end

    def gather(self, name: str, calls: list[Any]) -> list[Any]: ...  # child jobs (steps/children.py)


class ChildCall(Protocol[T_co]):
    """A child job as `gather` takes it: a `task.call(...)` (deferq.Call[T], whose task gives T)."""

    @property
    def _result(self) -> T_co: ...


MESSAGE_LIMIT = 500  # characters of a progress message that are stored

#: where a running job's progress goes: (job, fraction, message), never blocking the task
Reporter = Callable[[Job, float, "str | None"], None]


class JobControl:
    """The worker's side of one running job: where its progress goes and whether
    someone asked it to stop (`app.cancel(id)` on an active job)."""

    __slots__ = ("cancelled", "checkpoints", "report", "slot", "steps_for", "task")

    def __init__(self, report: Reporter | None = None,
                 steps_for: Callable[[Job], Checkpoints] | None = None) -> None:
        self.cancelled = False  # a plain flag: one thread sets it, the task's reads it
        self.report = report
        self.task: asyncio.Task[Any] | None = None  # an async job's task, to cancel it
        self.slot: Slot | None = None  # the concurrency slot this run took (limits/slots.py)
        self.steps_for = steps_for  # makes the job's durable steps when it first reaches one
        self.checkpoints: Checkpoints | None = None

    def steps(self, job: Job) -> Checkpoints:
        if self.checkpoints is None:
            if self.steps_for is None:
                raise ConfigError("durable steps need the job to run under a worker "
                                  "(or deferq.testing), where its store is known")
            self.checkpoints = self.steps_for(job)
        return self.checkpoints

    def request_cancel(self) -> None:
        """Set the flag a sync task reads; cancel an async task at its next await."""
        self.cancelled = True
        task = self.task
        if task is not None:
            task.get_loop().call_soon_threadsafe(task.cancel)


class RunningJob:
    """What `deferq.current_job()` gives a task: every attribute of its `Job` (read
    through), plus `progress()` and `cancel_requested`. `.job` is the Job itself."""

    __slots__ = ("control", "job")

    def __init__(self, job: Job, control: JobControl | None = None) -> None:
        self.job = job
        self.control = control or JobControl()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.job, name)

    def __repr__(self) -> str:
        return f"<RunningJob {self.job.id} {self.job.task} attempt {self.job.attempts}>"

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Report how far the task is, 0 to 1, with an optional message ("3 of 8
        files"). Cheap to call often: the worker stores it at once the first time, then
        at most every half second (the last value always), without blocking the task.
        `app.get(id).progress` / `.progress_message` read it back."""
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not math.isfinite(fraction):
            raise ValueError(f"progress must be a number from 0 to 1, got {fraction!r:.60}")
        if not 0 <= fraction <= 1:
            raise ValueError(f"progress must be from 0 to 1, got {fraction}")
        if message is not None and not isinstance(message, str):
            raise ValueError(f"a progress message must be a string, got {type(message).__name__}")
        report = self.control.report
        if report is not None:
            report(self.job, float(fraction), message[:MESSAGE_LIMIT] if message else message)

    @property
    def cancel_requested(self) -> bool:
        """True once someone asked this job to stop (`app.cancel(id)` while it runs).
        An async task is cancelled at its next await; a sync task should check this
        now and then and return. Either way the job ends `cancelled`."""
        return self.control.cancelled

    @property
    def slot_fence(self) -> int | None:
        """The fencing token of this run's concurrency slot (a task declared with
        `concurrency=`): a number that grows each time a slot of the same key is
        granted, so a later holder always has a larger one. Pass it to the system the
        task writes to, which should refuse a write carrying a smaller fence than one it
        has seen. None for a task without a concurrency limit."""
        return None if self.control.slot is None else self.control.slot.fence

    def holds_slot(self) -> bool:
        """Asks the store whether this run still holds its concurrency slot. A slot is
        a lease: a worker paused (or cut off from the store) past its lease loses it,
        and another job of the same key may run. False for a task without a
        concurrency limit; store errors are raised."""
        return self.control.slot is not None and self.control.slot.held()

    # -- durable steps (docs/steps.md) --------------------------------------------------------

    @overload
    def step(self, name: str, fn: Callable[..., T], /, *args: Any, undo: Callable[[T], Any],
             **kwargs: Any) -> T: ...

    @overload
    def step(self, name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T: ...

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, undo: Any = None, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` the first time the job reaches the step `name` and
        keep its result (JSON) in the store; when the job runs again (after a sleep, an
        event, a crash or a retry) return the kept result without running `fn`.
        `undo`: called with the kept result if the job ends dead or is cancelled
        (`step_with_undo`, whose arguments are typed as `fn`'s; docs/steps.md, "Compensation")."""
        steps = self.control.steps(self.job)
        if undo is not None:
            return steps.step_with_undo(name, undo, fn, args, kwargs)
        return steps.step(name, fn, args, kwargs)

    def step_in_transaction(self, connection: Any, name: str, fn: Callable[P, T], /,
                            *args: P.args, **kwargs: P.kwargs) -> T:
        """`step`, with its checkpoint written on your open database `connection`
        (PostgreSQL, MySQL) inside the transaction where `fn` writes its own rows: commit
        it, and both the rows and the checkpoint are kept, or neither. If another attempt
        kept the step first, this raises `StepTaken`: roll back."""
        return self.control.steps(self.job).step_within(connection, name, fn, args, kwargs)  # type: ignore[no-any-return]

    @overload
    async def step_async(self, name: str, fn: Callable[..., Any], /, *args: Any, undo: Callable[[Any], Any],
                         **kwargs: Any) -> Any: ...

    @overload
    async def step_async(self, name: str, fn: Callable[P, Awaitable[T]], /,
                         *args: P.args, **kwargs: P.kwargs) -> T: ...

    @overload
    async def step_async(self, name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T: ...

    async def step_async(self, name: str, fn: Callable[..., Any], /, *args: Any, undo: Any = None,
                         **kwargs: Any) -> Any:
        """`step` for async tasks: `fn` may be a coroutine function (`undo`, a plain one)."""
        if undo is not None:
            return await self.step_with_undo_async(name, undo, fn, *args, **kwargs)
        return await self._step_async(name, None, fn, args, kwargs)

    def step_with_retry(self, name: str, retry: StepRetry, fn: Callable[P, T], /,
                        *args: P.args, **kwargs: P.kwargs) -> T:
        """`step`, with tries of its own (`deferq.StepRetry`): a try that raises leaves the
        worker until the next try (its attempt not counted, earlier steps not redone)."""
        return self.control.steps(self.job).step(name, fn, args, kwargs, retry)  # type: ignore[no-any-return]

    @overload
    async def step_with_retry_async(self, name: str, retry: StepRetry, fn: Callable[P, Awaitable[T]], /,
                                    *args: P.args, **kwargs: P.kwargs) -> T: ...

    @overload
    async def step_with_retry_async(self, name: str, retry: StepRetry, fn: Callable[P, T], /,
                                    *args: P.args, **kwargs: P.kwargs) -> T: ...

    async def step_with_retry_async(self, name: str, retry: StepRetry, fn: Callable[P, Any], /,
                                    *args: P.args, **kwargs: P.kwargs) -> Any:
        """`step_with_retry` for async tasks: `fn` may be a coroutine function."""
        return await self._step_async(name, retry, fn, args, kwargs)

    def step_with_undo(self, name: str, undo: Callable[[Any], Any], fn: Callable[P, T], /,
                       *args: P.args, **kwargs: P.kwargs) -> T:
        """`step`, with an undo handler: when the job ends dead or is cancelled, the undo
        handlers of its finished steps are called, the last step's first, each once, with
        the step's kept result (docs/steps.md, "Compensation")."""
        return self.control.steps(self.job).step_with_undo(name, undo, fn, args, kwargs)  # type: ignore[no-any-return]

    @overload
    async def step_with_undo_async(self, name: str, undo: Callable[[Any], Any], fn: Callable[P, Awaitable[T]], /,
                                   *args: P.args, **kwargs: P.kwargs) -> T: ...

    @overload
    async def step_with_undo_async(self, name: str, undo: Callable[[Any], Any], fn: Callable[P, T], /,
                                   *args: P.args, **kwargs: P.kwargs) -> T: ...

    async def step_with_undo_async(self, name: str, undo: Callable[[Any], Any], fn: Callable[P, Any], /,
                                   *args: P.args, **kwargs: P.kwargs) -> Any:
        """`step_with_undo` for async tasks: `fn` may be a coroutine function (the undo
        handler is a plain function)."""
        steps = self.control.steps(self.job)
        record = await asyncio.to_thread(steps.start, name, fn)
        if record is not None:
            steps.undo_on(name, undo)
            return record["result"]
        started = steps.now()
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return await asyncio.to_thread(steps.kept_with_undo, name, fn, undo, result, started)

    async def _step_async(self, name: str, retry: StepRetry | None, fn: Callable[..., Any],
                          args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        steps = self.control.steps(self.job)
        record = await asyncio.to_thread(steps.start, name, fn)  # None: run it, the lease held
        if record is not None:
            return record["result"]
        started = steps.now()
        try:
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            await asyncio.to_thread(steps.failed, name, retry, exc)
            raise
        return await asyncio.to_thread(steps.kept, name, fn, result, started)

    def patched(self, name: str) -> bool:
        """Whether this job takes the code behind patch `name`, new in a deploy: False for
        a job that ran past this point under the code before it (it keeps the old path),
        else True, kept for every later run of the job (docs/steps.md, "Safe deploys")."""
        return self.control.steps(self.job).patched(name)

    async def patched_async(self, name: str) -> bool:
        return await asyncio.to_thread(self.patched, name)

    def sleep(self, name: str, delay: float | timedelta) -> None:
        """Leave the worker for `delay` (seconds or a timedelta) from when the job first
        reached this sleep; the job runs again then, and passes it."""
        seconds = duration(delay, "a sleep's delay")
        self.control.steps(self.job).sleep(name, delay=seconds)

    def sleep_until(self, name: str, when: datetime | float) -> None:
        """`sleep` until `when` (an aware datetime, or epoch seconds)."""
        until = _epoch(when)
        self.control.steps(self.job).sleep(name, until=until)

    def wait_for(self, name: str, event: str, key: str, timeout: float | timedelta) -> Any:
        """Leave the worker until `app.send_event(event, key, data)` (then return its
        data) or `timeout` after the job first reached this wait (then return None). An
        event sent since the job was created, while it was not yet waiting, counts."""
        seconds = duration(timeout, "a wait's timeout")
        return self.control.steps(self.job).wait_for(name, event, key, seconds)

    async def sleep_async(self, name: str, delay: float | timedelta) -> None:
        await asyncio.to_thread(self.sleep, name, delay)

    async def sleep_until_async(self, name: str, when: datetime | float) -> None:
        await asyncio.to_thread(self.sleep_until, name, when)

    async def wait_for_async(self, name: str, event: str, key: str, timeout: float | timedelta) -> Any:
        return await asyncio.to_thread(self.wait_for, name, event, key, timeout)

    # -- child jobs (docs/steps.md "Child jobs") ------------------------------------------------

    def gather(self, name: str, calls: Iterable[ChildCall[T]]) -> list[T]:
        """Start child jobs (`task.call(...)` values) the first time the job reaches `name`,
        leave the worker while they run, and return their results in order once the last
        one has ended. A child that ends dead or cancelled raises `deferq.ChildFailed`."""
        return self.control.steps(self.job).gather(name, list(calls))

    def run_child(self, name: str, call: ChildCall[T]) -> T:
        """`gather` of one child job: its result."""
        return self.gather(name, [call])[0]

    async def gather_async(self, name: str, calls: Iterable[ChildCall[T]]) -> list[T]:
        return await asyncio.to_thread(self.gather, name, list(calls))

    async def run_child_async(self, name: str, call: ChildCall[T]) -> T:
        return await asyncio.to_thread(self.run_child, name, call)


def duration(value: float | timedelta, what: str) -> float:
    """Seconds given as a number or a timedelta, checked: at most MAX_DELAY (ten years)."""
    number = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number) or number < 0:
        raise ConfigError(f"{what} must be seconds or a timedelta, 0 or more, got {value!r:.60}")
    if number > MAX_DELAY:
        raise ConfigError(f"{what} must be at most ten years ({MAX_DELAY:g} seconds), got {value!r:.60}")
    return float(number)


def _epoch(when: datetime | float) -> float:
    """A sleep's end: at most MAX_DELAY (ten years) from now."""
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise ConfigError(f"sleep_until needs an aware datetime (with a time zone), got {when}")
        until = when.timestamp()
    elif isinstance(when, bool) or not isinstance(when, int | float) or not math.isfinite(when) or when < 0:
        raise ConfigError(f"sleep_until's time must be an aware datetime or epoch seconds, got {when!r:.60}")
    else:
        until = float(when)
    if until - time.time() > MAX_DELAY:
        raise ConfigError(f"sleep_until's time must be within ten years of now, got {when!r:.60}")
    return until


running_job: ContextVar[RunningJob | None] = ContextVar("deferq_current_job", default=None)


def current_job() -> RunningJob | None:
    """The job whose task is running in this context (None outside a task): its
    attempt number, id or timeout, `progress(...)` and `cancel_requested`."""
    return running_job.get()
