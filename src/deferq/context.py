"""The job whose task runs in this context: `deferq.current_job()`.

A context variable, so each runner thread and each asyncio task sees its own job.
What it holds is a `RunningJob`: the Job's attributes (id, attempts, args, ...), and
what a task may say to or hear from its worker while it runs: `progress(...)`,
`cancel_requested`, and its concurrency slot's `slot_fence` and `holds_slot()`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from .job import Job

if TYPE_CHECKING:
    from .limits import HeldSlot

MESSAGE_LIMIT = 500  # characters of a progress message that are stored

#: where a running job's progress goes: (job, fraction, message), never blocking the task
Reporter = Callable[[Job, float, "str | None"], None]


class JobControl:
    """The worker's side of one running job: where its progress goes and whether
    someone asked it to stop (`app.cancel(id)` on an active job)."""

    __slots__ = ("cancelled", "report", "slot", "task")

    def __init__(self, report: Reporter | None = None) -> None:
        self.cancelled = False  # a plain flag: one thread sets it, the task's reads it
        self.report = report
        self.task: asyncio.Task[Any] | None = None  # an async job's task, to cancel it
        self.slot: HeldSlot | None = None  # the concurrency slot this run took (limits.py)

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


running_job: ContextVar[RunningJob | None] = ContextVar("deferq_current_job", default=None)


def current_job() -> RunningJob | None:
    """The job whose task is running in this context (None outside a task): its
    attempt number, id or timeout, `progress(...)` and `cancel_requested`."""
    return running_job.get()
