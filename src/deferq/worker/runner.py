"""Running one job and deciding its outcome: the retry policy, in one place."""

from __future__ import annotations

import asyncio
import logging
import traceback
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import orjson

from ..backends.base import Outcome
from ..errors import JobTimeout, Retry
from ..job import Job, JobState

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("deferq.worker")


_current_job: ContextVar[Job | None] = ContextVar("deferq_current_job", default=None)


def current_job() -> Job | None:
    """The job whose task is running in this context (None outside a task): lets a task
    read its attempt number, id or timeout."""
    return _current_job.get()


class UnknownTask(LookupError):
    """A job names a task this worker does not know."""


def run_sync(app: App, job: Job) -> tuple[Outcome, BaseException | None]:
    """Run a sync task here (a worker thread) and return its outcome."""
    token = _current_job.set(job)
    try:
        task = _task_of(app, job)
        result = task.fn(*job.args, **job.kwargs)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes an outcome
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        return decide_failure(app, job, exc), exc
    finally:
        _current_job.reset(token)
    return succeeded(job, result), None


async def run_async(app: App, job: Job) -> tuple[Outcome, BaseException | None]:
    """Run an async task on the worker's event loop, cancelled at its timeout."""
    token = _current_job.set(job)
    try:
        task = _task_of(app, job)
        coro = task.fn(*job.args, **job.kwargs)
        timeout = app.timeout_for(job)
        try:
            result = await asyncio.wait_for(coro, timeout)
        except TimeoutError:
            raise JobTimeout(f"timed out after {timeout:g}s") from None
    except Exception as exc:  # noqa: BLE001
        return decide_failure(app, job, exc), exc
    finally:
        _current_job.reset(token)
    return succeeded(job, result), None


def _task_of(app: App, job: Job) -> Any:
    task = app.tasks.get(job.task)
    if task is None:
        raise UnknownTask(f"unknown task {job.task!r}")
    if "_unreadable_payload" in job.kwargs:
        raise UnknownTask(f"unreadable payload: {job.kwargs['_unreadable_payload']}")
    return task


def succeeded(job: Job, result: Any) -> Outcome:
    try:
        orjson.dumps(result)
    except TypeError:
        result = repr(result)  # results are informative; never fail a job over one
    return Outcome(job, "succeeded", result=result)


def decide_failure(app: App, job: Job, exc: BaseException) -> Outcome:
    """Retry with the task's backoff while attempts remain, else dead."""
    if isinstance(exc, UnknownTask):
        return Outcome(job, "dead", error=str(exc))
    error = describe(exc)
    if job.attempts >= job.max_attempts:
        return Outcome(job, "dead", error=error)
    if isinstance(exc, Retry) and exc.delay is not None:
        delay = max(0.0, float(exc.delay))
    else:
        delay = max(0.0, float(app.defaults_for(job.task).backoff(job.attempts)))
    return Outcome(job, "retry", delay=delay, error=error)


def describe(exc: BaseException) -> str:
    if isinstance(exc, Retry | JobTimeout):
        return f"{type(exc).__name__}: {exc}"
    lines = traceback.format_exception(exc)
    text = "".join(lines)
    return text[-4000:]  # the end of a traceback says the most


def fire_hooks(app: App, outcome: Outcome, exc: BaseException | None) -> None:
    """App hooks and task hooks after a settled outcome; a failing hook is only logged."""
    event = {"succeeded": "succeeded", "retry": "retrying", "dead": "dead"}.get(outcome.kind)
    if event is None:
        return
    task = app.tasks.get(outcome.job.task)
    task_hook = None
    if task is not None:
        task_hook = {"succeeded": task.on_success, "dead": task.on_failure}.get(event)
    if not app.hooks[event] and task_hook is None:
        return  # the common case: nothing to call, so no copy of the job to build
    job = outcome.job
    if outcome.kind == "succeeded":
        job = job.with_state(JobState.SUCCEEDED, result=outcome.result)
    else:
        job = job.with_state(
            JobState.SCHEDULED if outcome.kind == "retry" else JobState.DEAD, error=outcome.error
        )
    hooks = ([task_hook] if task_hook else []) + list(app.hooks[event])
    for hook in hooks:
        try:
            hook(job, exc)
        except Exception:  # noqa: BLE001
            log.exception("hook %s failed for job %s", getattr(hook, "__name__", hook), job.id)


def run_eagerly(app: App, job: Job) -> Job:
    """Eager mode: run the job now, in this thread, retrying at once until it ends.

    Delays are ignored: a unit test wants to see the outcome, not wait for it.
    """
    backend = app.backend
    while (leased := backend.lease_now(job.id, "eager", app.lease)) is not None:
        task = app.tasks.get(leased.task)
        if task is not None and task.is_async:
            outcome, exc = asyncio.run(run_async(app, leased))
        else:
            outcome, exc = run_sync(app, leased)
        if outcome.kind == "retry":
            outcome = Outcome(leased, "retry", delay=0.0, error=outcome.error)
        backend.settle([outcome])
        fire_hooks(app, outcome, exc)
    return app.get(job.id) or job
