"""Running one job and deciding its outcome: the retry policy, in one place.

Everything comes from the job's resolved `TaskSpec` and the middleware chain; the
runner never looks anything up in the App.
"""

from __future__ import annotations

import asyncio
import traceback
from typing import Any

import orjson

from ..backends.base import Outcome, OutcomeKind
from ..context import current_job, running_job
from ..errors import JobTimeout, PayloadError, Retry
from ..job import Job
from ..middleware import Chain
from ..registry import TaskSpec

__all__ = ["UnknownTask", "current_job", "decide_failure", "describe", "run_async", "run_sync"]


class UnknownTask(LookupError):
    """A job names a task this worker does not know."""


def run_sync(spec: TaskSpec, job: Job, chain: Chain) -> tuple[Outcome, BaseException | None]:
    """Run a sync task here (a runner thread) and return its outcome."""
    token = running_job.set(job)
    exc: BaseException | None = None
    try:
        chain.run_before_run(job)
        outcome = succeeded(job, _call(spec, job))
    except BaseException as error:  # noqa: BLE001 - every failure becomes an outcome
        if isinstance(error, KeyboardInterrupt | SystemExit):
            raise
        exc, outcome = error, decide_failure(spec, job, error)
    finally:
        running_job.reset(token)
    chain.run_after(chain.after_run, job, outcome, exc)
    return outcome, exc


async def run_async(spec: TaskSpec, job: Job, chain: Chain) -> tuple[Outcome, BaseException | None]:
    """Run an async task on the worker's event loop, cancelled at its timeout."""
    token = running_job.set(job)
    exc: BaseException | None = None
    try:
        chain.run_before_run(job)
        coro = _call(spec, job)
        try:
            result = await asyncio.wait_for(coro, spec.timeout)
        except TimeoutError:
            raise JobTimeout(f"timed out after {spec.timeout:g}s") from None
        outcome = succeeded(job, result)
    except Exception as error:  # noqa: BLE001
        exc, outcome = error, decide_failure(spec, job, error)
    finally:
        running_job.reset(token)
    chain.run_after(chain.after_run, job, outcome, exc)
    return outcome, exc


def _call(spec: TaskSpec, job: Job) -> Any:
    """The task function called with the job's arguments, decoded to its annotations."""
    if spec.fn is None:
        raise UnknownTask(f"unknown task {job.task!r}")
    if "_unreadable_payload" in job.kwargs:
        raise UnknownTask(f"unreadable payload: {job.kwargs['_unreadable_payload']}")
    args, kwargs = job.args, job.kwargs
    if spec.decode is not None:
        args, kwargs = spec.decode(args, kwargs)
    return spec.fn(*args, **kwargs)


def succeeded(job: Job, result: Any) -> Outcome:
    try:
        orjson.dumps(result)
    except TypeError:
        result = repr(result)  # results are informative; never fail a job over one
    return Outcome(job, OutcomeKind.SUCCEEDED, result=result)


def decide_failure(spec: TaskSpec, job: Job, exc: BaseException) -> Outcome:
    """Retry with the task's backoff while attempts remain (the job's max_attempts, or the
    worker's --tries for a task that set none), else dead."""
    if isinstance(exc, UnknownTask | PayloadError):  # no retry can help: dead at once
        return Outcome(job, OutcomeKind.DEAD, error=str(exc))
    error = describe(exc)
    if job.attempts >= (job.max_attempts if spec.max_attempts is None else spec.max_attempts):
        return Outcome(job, OutcomeKind.DEAD, error=error)
    if isinstance(exc, Retry) and exc.delay is not None:
        delay = max(0.0, float(exc.delay))
    else:
        delay = max(0.0, float(spec.backoff(job.attempts)))
    return Outcome(job, OutcomeKind.RETRY, delay=delay, error=error)


def describe(exc: BaseException) -> str:
    if isinstance(exc, Retry | JobTimeout):
        return f"{type(exc).__name__}: {exc}"
    lines = traceback.format_exception(exc)
    text = "".join(lines)
    return text[-4000:]  # the end of a traceback says the most
