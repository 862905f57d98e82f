"""Waiting for a job's result: `job.wait()`, `app.wait(id)`, `GET /v1/jobs/{id}?wait=`.

The store wakes the waiter (backends: `wait_finished`, `changes`); a result comes back
as the task's return annotation says (msgspec, as task arguments do in codec.py), a
dead or cancelled job raises `JobFailed` with its last error.
"""

from __future__ import annotations

import asyncio
import functools
import typing
from collections.abc import Callable
from typing import Any

import orjson

from .codec import NATIVE
from .errors import DeferqError, JobFailed, PayloadError
from .job import WAITING_STATES, Job, JobState
from .task import AppLike


def result_of(app: AppLike[object], job: Job) -> Any:
    """A finished job's result, decoded; JobFailed when it went dead or was cancelled."""
    sealer = app.runtime.chain.sealer
    if sealer is not None:
        job = sealer.open_job(job)
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


def wait(app: AppLike[object], job_id: str, timeout: float | None = None) -> Any:
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
            raise TimeoutError(f"job {job_id} is still {job.state} after {timeout:g}s{no_worker_hint(app, job)}")


def no_worker_hint(app: AppLike[object], job: Job) -> str:
    """Why a job that waits may never start: no live worker serves its queue (from the
    heartbeats workers keep in kv "workers", each for twice its lease); "" otherwise."""
    if job.state not in WAITING_STATES:
        return ""
    try:
        records = app.backend.kv_list("workers")
    except DeferqError:
        return ""  # only a hint: the timeout is the answer
    served: set[str] = set()
    for raw in records.values():
        try:
            served.update(orjson.loads(raw).get("queues", []))
        except (orjson.JSONDecodeError, AttributeError, TypeError):
            continue
    if job.queue in served:
        return ""
    online = f"the workers online serve {', '.join(sorted(served))}" if served else "no worker is online"
    return f"; no worker serves its queue {job.queue!r} ({online}): start one with deferq worker -q {job.queue}"


async def wait_async(app: AppLike[object], job_id: str, timeout: float | None = None) -> Any:
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

