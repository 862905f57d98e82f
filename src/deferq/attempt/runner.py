"""Running one job and deciding its outcome: the retry policy, in one place.

Everything comes from the job's resolved `TaskSpec` and the middleware chain; the
runner never looks anything up in the App.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import orjson

from ..backends.base import Outcome, OutcomeKind
from ..context import JobControl, RunningJob, current_job, running_job
from ..errors import Backoff, ChildFailed, JobTimeout, PayloadError, Retry, Snooze, StepMismatch
from ..job import Job
from ..middleware import Chain
from ..registry import TaskSpec
from ..values import MAX_DELAY, MAX_PAUSE, capped
from .tracebacks import format_error

log = logging.getLogger("deferq.worker")

# Bytes of a job's result as JSON: what every store keeps in one statement of a settle
# (MySQL's smallest default max_allowed_packet is 4 MiB, escaping may double a text).
RESULT_LIMIT = 1024 * 1024

__all__ = ["UnknownTask", "current_job", "decide_failure", "describe", "run_async", "run_sync"]


class UnknownTask(LookupError):
    """A job names a task this worker does not know."""


def run_sync(
    spec: TaskSpec, job: Job, chain: Chain, control: JobControl | None = None
) -> tuple[Outcome, BaseException | None]:
    """Run a sync task here (a runner thread) and return its outcome. `control` is how
    the worker hears the task's progress and tells it to stop."""
    token = running_job.set(RunningJob(job, control))
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
    if control is not None and control.cancelled:  # asked to stop: whatever it did, it stopped
        outcome = stopped(job)
    if control is not None and control.checkpoints is not None:  # a durable job: its checkpoints may end too
        outcome = control.checkpoints.ended(outcome)
    chain.run_after_run(job, outcome, exc)
    return outcome, exc


async def run_async(
    spec: TaskSpec, job: Job, chain: Chain, control: JobControl | None = None
) -> tuple[Outcome, BaseException | None]:
    """Run an async task on the worker's event loop, cancelled at its timeout, or at
    its next await once someone asks it to stop."""
    control = control or JobControl()
    control.task = asyncio.current_task()
    token = running_job.set(RunningJob(job, control))
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
    except asyncio.CancelledError:
        if not control.cancelled:
            raise  # the worker is shutting down: not ours to turn into an outcome
        outcome = stopped(job)
    finally:
        running_job.reset(token)
    if control.cancelled:
        outcome = stopped(job)
    if control.checkpoints is not None:
        outcome = control.checkpoints.ended(outcome)
    chain.run_after_run(job, outcome, exc)
    return outcome, exc


def _call(spec: TaskSpec, job: Job) -> Any:
    """The task function called with the job's arguments, decoded to its annotations."""
    args, kwargs = arguments(spec, job)
    return spec.fn(*args, **kwargs)  # type: ignore[misc]  # arguments() refused a task without one


def arguments(spec: TaskSpec, job: Job) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The job's arguments decoded to its task's annotations; UnknownTask when this
    process lacks the task or cannot read the payload."""
    if spec.fn is None:
        raise UnknownTask(f"unknown task {job.task!r}")
    if "_unreadable_payload" in job.kwargs:
        raise UnknownTask(f"unreadable payload: {job.kwargs['_unreadable_payload']}")
    if spec.decode is not None:
        return spec.decode(job.args, job.kwargs)
    return job.args, job.kwargs


def stopped(job: Job) -> Outcome:
    """The outcome of a job someone asked to stop while it ran (`app.cancel(id)`)."""
    return Outcome(job, OutcomeKind.CANCELLED, error="cancelled while running")


def succeeded(job: Job, result: Any, chunk_call: str | None = None) -> Outcome:
    """Results are informative: never fail a job over one. One JSON cannot carry is kept
    as its repr; one over RESULT_LIMIT as a sentence that says so, with a warning.
    `chunk_call`: the chunk call that ran it (attempt/chunk.py)."""
    if result is not None:  # most tasks return nothing: nothing to try
        try:
            size = len(orjson.dumps(result))
        except TypeError:
            result = repr(result)
            size = len(orjson.dumps(result))
        if size > RESULT_LIMIT:
            log.warning("job %s (%s): its result of %d bytes (JSON) is over the %d a job keeps; a note is "
                        "kept instead", job.id, job.task, size, RESULT_LIMIT)
            result = f"result not kept: {size} bytes of JSON, over the {RESULT_LIMIT} a job's result may be"
    return Outcome(job, OutcomeKind.SUCCEEDED, result=result, chunk_call=chunk_call)


def decide_failure(spec: TaskSpec, job: Job, exc: BaseException) -> Outcome:
    """Retry with the task's backoff while attempts remain (the job's max_attempts, or the
    worker's --tries for a task that set none), else dead. `deferq.Snooze` is no failure:
    the job waits its delay and the attempt is not counted."""
    if isinstance(exc, UnknownTask | PayloadError | StepMismatch | ChildFailed):  # no retry can help: dead at once
        return Outcome(job, OutcomeKind.DEAD, error=str(exc))
    if isinstance(exc, Snooze):  # not a failure: back later, the attempt not counted
        delay = asked(job, exc.delay, MAX_PAUSE if isinstance(exc, Backoff) else MAX_DELAY, type(exc).__name__)
        return Outcome(job, OutcomeKind.SNOOZE, delay=delay, waits_for=getattr(exc, "waits_for", None),
                       due=getattr(exc, "due", None))
    error = describe(exc)
    if job.attempts >= (job.max_attempts if spec.max_attempts is None else spec.max_attempts):
        return Outcome(job, OutcomeKind.DEAD, error=error)
    wanted = float(exc.delay) if isinstance(exc, Retry) and exc.delay is not None else math.nan
    if math.isnan(wanted):  # no delay asked (or NaN): the task's backoff
        delay = asked(job, float(spec.backoff(job.attempts)), MAX_DELAY, "backoff")
    else:
        delay = asked(job, wanted, MAX_DELAY, "Retry")
    return Outcome(job, OutcomeKind.RETRY, delay=delay, error=error)


def asked(job: Job, seconds: float, cap: float, what: str) -> float:
    """A delay a task asked for, often a called service's Retry-After: within 0..`cap`
    (values.py), with a warning when it was longer (inf, a date in the year 9999)."""
    delay = capped(seconds, cap)
    if delay < seconds:
        log.warning("job %s (%s): its %s of %.6g seconds is clamped to %g seconds (%g days), the longest "
                    "deferq allows", job.id, job.task, what, seconds, cap, cap / 86400)
    return delay


def describe(exc: BaseException) -> str:
    """The error a job keeps: its traceback (tracebacks.py), its last 4,000 characters
    when longer: the end says the most."""
    text = f"{type(exc).__name__}: {exc}" if isinstance(exc, Retry | JobTimeout) else format_error(exc)[-4000:]
    # PostgreSQL keeps no NUL in text: written out, so the error reads the same on every store
    return text.replace("\x00", "\\x00") if "\x00" in text else text
