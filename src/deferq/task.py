"""Tasks and the producer side: turning a call into a stored job."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from . import backoff as backoff_module
from .backends.base import Enqueue
from .job import Job, Priority, encode_payload, new_job_id

if TYPE_CHECKING:
    from .app import App

Hook = Callable[..., Any]

OPTION_NAMES = ("delay", "at", "queue", "priority", "max_attempts", "timeout", "key", "connection")


@dataclass(frozen=True)
class JobOptions:
    """What a producer may choose per job. `None` means "the task's default"."""

    delay: float = 0.0
    at: float | None = None
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    timeout: float | None = None
    key: str | None = None
    connection: Any = None

    @classmethod
    def parse(cls, **options: Any) -> JobOptions:
        unknown = set(options) - set(OPTION_NAMES)
        if unknown:
            raise ValueError(
                f"unknown option {sorted(unknown)[0]!r}: options are {', '.join(OPTION_NAMES)}"
            )
        parsed: dict[str, Any] = dict(options)
        if "delay" in parsed:
            parsed["delay"] = _seconds(parsed["delay"], "delay")
        if parsed.get("at") is not None:
            parsed["at"] = _epoch(parsed["at"])
        if parsed.get("priority") is not None:
            parsed["priority"] = Priority.parse(parsed["priority"])
        if parsed.get("max_attempts") is not None:
            parsed["max_attempts"] = _positive_int(parsed["max_attempts"], "max_attempts")
        if parsed.get("timeout") is not None:
            parsed["timeout"] = _positive(parsed["timeout"], "timeout")
        if parsed.get("queue") is not None:
            parsed["queue"] = _queue_name(parsed["queue"])
        if parsed.get("key") is not None and not isinstance(parsed["key"], str):
            raise ValueError(f"key must be a string, got {type(parsed['key']).__name__}")
        return cls(**parsed)

    def merged(self, other: JobOptions) -> JobOptions:
        """These options overridden by whatever `other` sets."""
        changes = {
            name: getattr(other, name)
            for name in OPTION_NAMES
            if getattr(other, name) != getattr(JobOptions, name, None)
        }
        return replace(self, **changes)


@dataclass(frozen=True)
class TaskDefaults:
    queue: str = "default"
    priority: int = Priority.NORMAL
    max_attempts: int = 3
    timeout: float | None = 300.0
    backoff: Callable[[int], float] = backoff_module.DEFAULT


@dataclass(frozen=True)
class Call:
    """A task call not yet stored; `app.enqueue_many([t.call(...), ...])` stores many."""

    task: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    options: JobOptions = field(default_factory=JobOptions)


class Task:
    """A registered function. Call it directly to run it here; `.enqueue` to defer it."""

    def __init__(
        self,
        app: App,
        fn: Callable[..., Any],
        name: str,
        defaults: TaskDefaults,
        on_success: Hook | None = None,
        on_failure: Hook | None = None,
        options: JobOptions | None = None,
    ) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.defaults = defaults
        self.is_async = inspect.iscoroutinefunction(fn)
        self.on_success = on_success
        self.on_failure = on_failure
        self._options = options or JobOptions()
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.defaults.queue}>"

    def options(self, **options: Any) -> Task:
        """This task with per-job options: delay, at, queue, priority, max_attempts,
        timeout, key, connection."""
        merged = self._options.merged(JobOptions.parse(**options))
        return Task(
            self.app, self.fn, self.name, self.defaults, self.on_success, self.on_failure, merged
        )

    def call(self, *args: Any, **kwargs: Any) -> Call:
        return Call(self.name, args, kwargs, self._options)

    def enqueue(self, *args: Any, **kwargs: Any) -> Job:
        return self.app.enqueue_many([self.call(*args, **kwargs)])[0]

    async def enqueue_async(self, *args: Any, **kwargs: Any) -> Job:
        return (await self.app.enqueue_many_async([self.call(*args, **kwargs)]))[0]


def build_enqueue(call: Call, defaults: TaskDefaults | None, now: float) -> Enqueue:
    """The stored form of a call: task defaults overridden by the call's options.

    `defaults` is None when the producer does not know the task (enqueue by name):
    then the timeout is left to the worker's task definition.
    """
    payload = encode_payload(call.task, call.args, call.kwargs)
    opts = call.options
    known = defaults is not None
    defaults = defaults or TaskDefaults()
    job = Job(
        id=new_job_id(),
        task=call.task,
        args=tuple(call.args),
        kwargs=dict(call.kwargs),
        queue=opts.queue or defaults.queue,
        priority=defaults.priority if opts.priority is None else opts.priority,
        max_attempts=opts.max_attempts or defaults.max_attempts,
        timeout=opts.timeout if opts.timeout is not None or not known else defaults.timeout,
        key=opts.key,
        run_at=opts.at or 0.0,
        created_at=now,
    )
    return Enqueue(job, opts.delay, payload)


def _seconds(value: Any, name: str) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be seconds or a timedelta, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value}")
    return float(value)


def _epoch(value: Any) -> float:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("at= needs a timezone-aware datetime (e.g. datetime.now(UTC))")
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"at must be a datetime or epoch seconds, got {value!r}")
    return float(value)


def _positive(value: Any, name: str) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
    return value


def _queue_name(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 100 or any(c in value for c in "{}\0 "):
        raise ValueError(f"queue name {value!r} must be 1-100 characters without spaces or braces")
    return value


def task_defaults(
    queue: str = "default",
    priority: str | int = "normal",
    max_attempts: int = 3,
    timeout: float | timedelta | None = 300.0,
    backoff: Callable[[int], float] = backoff_module.DEFAULT,
) -> TaskDefaults:
    if not callable(backoff):
        raise ValueError("backoff must be a callable (attempt) -> seconds, e.g. backoff.fixed(5)")
    return TaskDefaults(
        queue=_queue_name(queue),
        priority=Priority.parse(priority),
        max_attempts=_positive_int(max_attempts, "max_attempts"),
        timeout=None if timeout is None else _positive(timeout, "timeout"),
        backoff=backoff,
    )
