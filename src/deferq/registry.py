"""The registry: the tasks an App knows, its middleware, a resolved TaskSpec per job, the
limits its tasks declare (`Limited`, enforced by limits/) and its fair queues.

The worker holds the registry, not the App: for each leased job it asks `spec_for(job)`
once and hands the spec to the runner, so running, timing out and retrying a job never
go back to the App.

A worker may bring defaults of its own (`deferq worker --tries N --delay S`) for what a
task did not set explicitly (`Task.explicit`): they go into the specs, never into the
stored jobs.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from . import backoff as backoff_module
from .backends.base import Outcome, OutcomeKind
from .chunks import Chunk, chunk_of, codec_of
from .codec import Decoder
from .job import Job
from .middleware import Chain, Middleware
from .options import TaskDefaults
from .task import FairKeys, Hook, Task
from .values import Rate, check_fields, could_fill, filled

log = logging.getLogger("deferq.worker")

EVENTS = ("succeeded", "retrying", "dead")
DEFAULT_ATTEMPTS = TaskDefaults().max_attempts  # what a job carries when nobody chose


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """Everything needed to run one job. `fn` is None for a task this process lacks."""

    name: str
    fn: Callable[..., Any] | None
    is_async: bool = False
    timeout: float | None = None
    backoff: Callable[[int], float] = backoff_module.DEFAULT
    on_success: Hook | None = None
    on_failure: Hook | None = None
    max_attempts: int | None = None  # the worker's --tries, in place of the job's max_attempts
    decode: Decoder | None = None  # arguments back to their annotated types (codec.py)
    chunk: Chunk | None = None  # a chunk task's: one call takes many of its jobs (chunks.py)


@dataclass(frozen=True)
class Limited:
    """A task's declared limits (`@app.task(rate=..., concurrency=...)`), and how to name
    their keys from one call; the Limits middleware (limits/) enforces them."""

    task: str
    signature: inspect.Signature
    rate: Rate | None = None
    rate_key: str | None = None
    concurrency: int | None = None
    concurrency_key: str | None = None
    # seconds a rate's turn may be past when its job comes back and still be its own: a
    # chunk task's item waits up to its Chunk.wait for the call (rate.py, take_turn)
    late_ok: float = 0.0

    def key(self, template: str | None, args: Any, kwargs: dict[str, Any]) -> str:
        """A limit's key for one call (the task's name without a template); ValueError
        (one sentence) when the call cannot fill the template."""
        if template is None:
            return self.task
        return filled(template, self.signature, self.task, args, kwargs, "the limit key")

    def pause_key(self, args: Any, kwargs: dict[str, Any]) -> str:
        """What `deferq.Backoff` pauses: the rate's key, else the concurrency's, else the task."""
        return self.key(self.rate_key or self.concurrency_key, args, kwargs)

    def to_dict(self) -> dict[str, Any]:
        """As a worker's heartbeat tells the console (the Limits page) what its code declares."""
        return {"rate": self.rate.text if self.rate else None, "rate_key": self.rate_key,
                "concurrency": self.concurrency, "concurrency_key": self.concurrency_key}

    def check(self, args: Any, kwargs: dict[str, Any]) -> None:
        for template in (self.rate_key, self.concurrency_key):
            if template is not None:
                self.key(template, args, kwargs)


def limited(task: str, fn: Callable[..., Any], **limits: Any) -> Limited:
    """Checked when the task is declared: every {field} must be one of its parameters."""
    signature = inspect.signature(fn)
    for name in ("rate_key", "concurrency_key"):
        check_fields(name, limits.get(name), task, signature)
    return Limited(task, signature, **limits)


class Registry:
    def __init__(self) -> None:
        self.tasks: dict[str, Task[..., Any]] = {}
        self.hooks: dict[str, list[Hook]] = {event: [] for event in EVENTS}
        self.chain = Chain()
        self._specs: dict[str, TaskSpec] = {}
        self.limits: dict[str, Limited] = {}  # task name -> its declared limits
        self.fair_queues: dict[str, FairKeys] = {}  # queue name -> its declaration (App.fair_queue)
        self._event_hooks = False
        self._worker_attempts: int | None = None
        self._worker_backoff: Callable[[int], float] | None = None

    def names_limit(self, name: str) -> bool:
        """Whether a job of these tasks could meet a limit named `name`: a task's name, a
        queue (queue:NAME), or a key one of the tasks' declared key templates could make."""
        if name in self.tasks or name.startswith("queue:"):
            return True
        return any(could_fill(template, name) for limited in self.limits.values()
                   for template in (limited.rate_key, limited.concurrency_key) if template)

    def add_task(self, task: Task[..., Any]) -> None:
        known = self.tasks.get(task.name)
        if known is not None and known.fn is not task.fn:
            raise ValueError(f"a task named {task.name!r} is already registered")
        fair = self.fair_queues.get(task.defaults.queue) if task.defaults.fair_key is None else None
        refusal = fair.refusal(task) if fair is not None else None
        if refusal:
            raise ValueError(refusal)
        if task.chunk is not None:
            chunk_of(task.fn, task.name)  # one list parameter, a plain function (ValueError)
        self.tasks[task.name] = task
        self._specs.pop(task.name, None)  # made on first use: see _spec
        d = task.defaults
        if d.rate is not None or d.concurrency is not None:
            self.limits[task.name] = limited(
                task.name, task.fn, rate=d.rate, rate_key=d.rate_key,
                concurrency=d.concurrency, concurrency_key=d.concurrency_key,
                late_ok=task.chunk.wait if task.chunk is not None else 0.0,
            )
            self.chain.changed()  # the Limits middleware is busy now
        if d.fair_key is not None:
            check_fields("fair_key", d.fair_key, task.name, inspect.signature(task.fn))
        if task.on_success or task.on_failure:
            self._use_event_hooks()

    def add_fair_queue(self, fair: FairKeys) -> None:
        """Declare a fair queue; refused when a task declared on it cannot fill its key."""
        known = self.fair_queues.get(fair.name)
        if known is not None and known != fair:
            raise ValueError(f"queue {fair.name!r} is already declared fair by {known.key!r}")
        for task in self.tasks.values():
            keyed = task.defaults.queue == fair.name and task.defaults.fair_key is None
            refusal = fair.refusal(task) if keyed else None
            if refusal:
                raise ValueError(refusal)
        self.fair_queues[fair.name] = fair

    def use_worker_defaults(self, max_attempts: int | None = None,
                            backoff: Callable[[int], float] | None = None) -> None:
        """A worker's defaults (`deferq worker --tries N --delay S`) for the tasks whose
        `@app.task(...)` set no max_attempts or no backoff. --tries applies to the jobs
        that carry deferq's default attempts: a job given its own max_attempts keeps it."""
        self._worker_attempts, self._worker_backoff = max_attempts, backoff
        self._specs.clear()  # remade on first use, with these defaults

    def add_hook(self, event: str, fn: Hook) -> None:
        if event not in EVENTS:
            raise ValueError(f"unknown event {event!r}: events are {', '.join(EVENTS)}")
        self.hooks[event].append(fn)
        self._use_event_hooks()

    def add_middleware(self, middleware: Middleware) -> None:
        self.chain.add(middleware)

    def spec_for(self, job: Job) -> TaskSpec:
        """The job's task, with the job's own timeout when it carries one, and its own
        max_attempts when it was given one (anything but deferq's default)."""
        spec = self._specs.get(job.task) or self._spec(job.task)
        if spec is None:
            return TaskSpec(job.task, None, timeout=job.timeout)
        if spec.max_attempts is not None and job.max_attempts != DEFAULT_ATTEMPTS:
            spec = replace(spec, max_attempts=None)
        if job.timeout is not None and job.timeout != spec.timeout:
            return replace(spec, timeout=job.timeout)
        return spec

    def _spec(self, name: str) -> TaskSpec | None:
        """A task's spec, made when its first job runs (its annotations may name classes
        defined after the task), with the worker's defaults where the task set none."""
        task = self.tasks.get(name)
        if task is None:
            return None
        backoff = task.defaults.backoff
        if self._worker_backoff is not None and "backoff" not in task.explicit:
            backoff = self._worker_backoff
        spec = self._specs[name] = TaskSpec(
            task.name, task.fn, task.is_async, task.defaults.timeout, backoff, task.on_success, task.on_failure,
            max_attempts=None if "max_attempts" in task.explicit else self._worker_attempts,
            decode=codec_of(task.fn, task.name, task.chunk).decoder, chunk=task.chunk,
        )
        return spec

    def _use_event_hooks(self) -> None:
        """Hooks ride on the middleware chain; added on first use so apps without hooks
        pay nothing per job."""
        if not self._event_hooks:
            self._event_hooks = True
            self.chain.add(EventHooks(self))


class EventHooks(Middleware):
    """`app.on(event)` hooks and a task's on_success / on_failure, after settle."""

    EVENT_OF = {OutcomeKind.SUCCEEDED: "succeeded", OutcomeKind.RETRY: "retrying", OutcomeKind.DEAD: "dead"}

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def after_settle(self, job: Job, outcome: Outcome, exc: BaseException | None) -> None:
        event = self.EVENT_OF.get(outcome.kind)
        if event is None:
            return
        spec = self.registry.spec_for(job)
        task_hook = None
        if spec is not None:
            task_hook = spec.on_success if event == "succeeded" else spec.on_failure if event == "dead" else None
        for hook in ([task_hook] if task_hook else []) + self.registry.hooks[event]:
            try:
                hook(job, exc)
            except Exception:  # noqa: BLE001 - a failing hook is only logged
                log.exception("hook %s failed for job %s", getattr(hook, "__name__", hook), job.id)
