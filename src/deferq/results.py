"""Waiting for a job's result: `job.wait()`, `app.wait(id)`, `GET /v1/jobs/{id}?wait=`.

The store wakes the waiter (backends: `wait_finished`, `changes`); a result comes back
as the task's return annotation says (msgspec, as task arguments do in codec.py), a
dead or cancelled job raises `JobFailed` with its last error.
"""

from __future__ import annotations

import asyncio
import functools
import typing
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from . import job as job_module
from .backends.base import Backend, Enqueue
from .codec import NATIVE
from .errors import ConfigError, JobFailed, PayloadError
from .job import Job, JobState
from .registry import Registry
from .task import Call


class App(Protocol):
    """What waiting, workflows and batches need of a deferq.App (never imported here:
    the App imports this module)."""

    @property
    def backend(self) -> Backend: ...

    @property
    def tasks(self) -> dict[str, Any]: ...

    @property
    def registry(self) -> Registry: ...

    def get(self, job_id: str) -> Job | None: ...

    def cancel(self, job_id: str) -> bool: ...

    def enqueue_many(self, calls: Iterable[Call]) -> list[Job]: ...

    def _enqueue_items(self, items: list[Enqueue], connection: Any) -> list[Job]: ...

    async def _enqueue_items_async(self, items: list[Enqueue]) -> list[Job]: ...

# Which App registered each task name, so `job.wait()` finds its store without the
# job carrying a reference (jobs are plain immutable values); the last App made answers
# for a task no App here registered (enqueued by name).
_owners: weakref.WeakValueDictionary[str, App] = weakref.WeakValueDictionary()
_last: list[weakref.ReferenceType[App]] = []


def register_owner(app: App, task: str | None = None) -> None:
    if task is None:
        _last[:] = [weakref.ref(app)]
    else:
        _owners[task] = app


def owner_of(job: Job) -> App:
    app = _owners.get(job.task) or (_last[0]() if _last else None)
    if app is None:
        raise ConfigError(f"no App here knows task {job.task!r}: use app.wait({job.id!r})")
    return app


def result_of(app: App, job: Job) -> Any:
    """A finished job's result, decoded; JobFailed when it went dead or was cancelled."""
    if job.state == JobState.SUCCEEDED:
        task = app.tasks.get(job.task)
        convert = _return_decoder(task.fn) if task is not None else None
        if convert is None or job.result is None:
            return job.result
        try:
            return convert(job.result)
        except PayloadError as exc:
            raise PayloadError(f"the result of job {job.id} ({job.task}): {exc}") from None
    raise JobFailed(job, str(job.state), job.error)


def wait(app: App, job_id: str, timeout: float | None = None) -> Any:
    """The result of job `job_id` once it finishes; TimeoutError past `timeout` seconds
    (None: wait as long as it takes)."""
    budget = float("inf") if timeout is None else max(0.0, timeout)
    while True:
        step = min(budget, 60.0)  # the store answers in slices: a wait without end stays live
        job = app.backend.wait_finished(job_id, step)
        if job is None:
            raise LookupError(f"no job {job_id} in the store (purged, or never enqueued here)")
        if job.state.finished:
            return result_of(app, job)
        budget -= step
        if budget <= 0:
            raise TimeoutError(f"job {job_id} is still {job.state} after {timeout:g}s")


async def wait_async(app: App, job_id: str, timeout: float | None = None) -> Any:
    """`wait` without blocking the event loop (the store's wait runs on a thread)."""
    return await asyncio.to_thread(wait, app, job_id, timeout)


@functools.cache
def _return_decoder(fn: Callable[..., Any]) -> Callable[[Any], Any] | None:
    """How to turn a stored result back into `fn`'s return annotation (None: as stored)."""
    try:
        hint = typing.get_type_hints(fn).get("return", inspect_empty)
    except (TypeError, ValueError, NameError):
        return None
    if hint in NATIVE or hint is inspect_empty:
        return None
    import msgspec

    def convert(value: Any) -> Any:
        try:
            return msgspec.convert(value, hint, strict=False)
        except msgspec.ValidationError as exc:
            raise PayloadError(f"does not match its return annotation: {exc}") from None

    return convert


inspect_empty = object()


def _wait_job(job: Job, timeout: float | None) -> Any:
    return wait(owner_of(job), job.id, timeout)


async def _wait_job_async(job: Job, timeout: float | None) -> Any:
    return await wait_async(owner_of(job), job.id, timeout)


# Job.wait() / wait_async() reach the store through these (job.py is below everything).
job_module.WAITERS[:] = [_wait_job, _wait_job_async]
