"""The registry: the tasks an App knows, its middleware, and a resolved TaskSpec per job.

The worker holds the registry, not the App: for each leased job it asks `spec_for(job)`
once and hands the spec to the runner, so running, timing out and retrying a job never
go back to the App.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from . import backoff as backoff_module
from .backends.base import Outcome, OutcomeKind
from .job import Job
from .middleware import Chain, Middleware
from .task import Hook, Task

log = logging.getLogger("deferq.worker")

EVENTS = ("succeeded", "retrying", "dead")


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


class Registry:
    def __init__(self) -> None:
        self.tasks: dict[str, Task[..., Any]] = {}
        self.hooks: dict[str, list[Hook]] = {event: [] for event in EVENTS}
        self.chain = Chain()
        self._specs: dict[str, TaskSpec] = {}
        self._event_hooks = False

    def add_task(self, task: Task[..., Any]) -> None:
        known = self.tasks.get(task.name)
        if known is not None and known.fn is not task.fn:
            raise ValueError(f"a task named {task.name!r} is already registered")
        self.tasks[task.name] = task
        self._specs[task.name] = TaskSpec(
            task.name, task.fn, task.is_async, task.defaults.timeout, task.defaults.backoff,
            task.on_success, task.on_failure,
        )  # fmt: skip
        if task.on_success or task.on_failure:
            self._use_event_hooks()

    def add_hook(self, event: str, fn: Hook) -> None:
        if event not in EVENTS:
            raise ValueError(f"unknown event {event!r}: events are {', '.join(EVENTS)}")
        self.hooks[event].append(fn)
        self._use_event_hooks()

    def add_middleware(self, middleware: Middleware) -> None:
        self.chain.add(middleware)

    def spec_for(self, job: Job) -> TaskSpec:
        """The job's task, with the job's own timeout when it carries one."""
        spec = self._specs.get(job.task)
        if spec is None:
            return TaskSpec(job.task, None, timeout=job.timeout)
        if job.timeout is not None and job.timeout != spec.timeout:
            return replace(spec, timeout=job.timeout)
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
        spec = self.registry._specs.get(job.task)
        task_hook = None
        if spec is not None:
            task_hook = spec.on_success if event == "succeeded" else spec.on_failure if event == "dead" else None
        for hook in ([task_hook] if task_hook else []) + self.registry.hooks[event]:
            try:
                hook(job, exc)
            except Exception:  # noqa: BLE001 - a failing hook is only logged
                log.exception("hook %s failed for job %s", getattr(hook, "__name__", hook), job.id)
