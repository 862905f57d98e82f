"""Errors users see. Each carries one sentence that says what is wrong and what to do."""

from __future__ import annotations

import email.utils
import math
import time


class DeferqError(Exception):
    """Base of every deferq error."""


class ConfigError(DeferqError, ValueError):
    """A wrong URL, option or configuration value."""


class PayloadError(DeferqError, TypeError):
    """Task arguments that cannot be stored as JSON."""


class StoreUnavailable(DeferqError, ConnectionError):
    """The store (database or Redis) cannot be reached right now."""


class StoreFull(StoreUnavailable):
    """The store is out of space (a full disk, Redis out of memory): nothing more can be
    written until room is made."""


class SchemaOutdated(DeferqError):
    """The database schema is older than this version of deferq."""


class MissingExtra(DeferqError, ImportError):
    """An optional part (a backend, `deferq serve`, metrics) is used without its package."""

    def __init__(self, extra: str, module: str, needed_by: str = "this backend") -> None:
        super().__init__(f"{needed_by} needs the {module!r} package: install deferq's {extra} extra from your "
                         f"copy of deferq (pip install '/path/to/deferq[{extra}]')")


class Retry(DeferqError):
    """Raise from a task to ask for another attempt after `delay` seconds.

    The attempt still counts; when attempts are used up the job goes dead. A delay over
    ten years (inf) is clamped to ten years with a warning; NaN, or none, is the task's backoff.
    """

    def __init__(self, delay: float | None = None, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.delay = delay
        self.reason = reason


class Snooze(DeferqError):
    """Raise from a task, or from a middleware's `before_run`, to put the job back for
    `delay` seconds without counting the attempt: the job is not failing, it has to
    wait (a limit, a resource not ready yet). A job that snoozes forever never ends. A
    delay over ten years (inf) is clamped to ten years with a warning; NaN is 0.
    """

    def __init__(self, delay: float, reason: str = "snoozed") -> None:
        super().__init__(reason)
        self.delay = max(0.0, float(delay))
        self.reason = reason


class Backoff(Snooze):
    """Raise from a task when the service it calls says "slow down" (an HTTP 429 or 503):
    the job waits `seconds`, its attempt not counted, and the task's limit key (its
    `rate_key`, else its `concurrency_key`, else the task's name) is paused as long for
    every worker. `retry_after` takes a `Retry-After` header as sent (seconds, or an
    HTTP date); one that cannot be read (NaN too) falls back to `seconds`. The worker
    clamps a wait longer than 7 days (inf, a date in the year 9999) to 7 days, the longest
    pause, and logs a warning."""

    def __init__(self, seconds: float = 30.0, *, retry_after: str | float | None = None,
                 reason: str = "backing off") -> None:
        wait = _retry_after(retry_after)
        super().__init__(float(seconds) if wait is None else wait, reason)


def _retry_after(value: str | float | None) -> float | None:
    """Seconds from a Retry-After value: a number of seconds or an HTTP date."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return None if math.isnan(value) else max(0.0, float(value))
    try:
        seconds = float(value.strip())
    except ValueError:
        pass
    else:
        return None if math.isnan(seconds) else max(0.0, seconds)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return None if when.tzinfo is None else max(0.0, when.timestamp() - time.time())


class StepMismatch(DeferqError, ValueError):
    """A durable step's name no longer matches what the job stored under it when it first
    ran (another function, another kind, another order): the job ends dead, since no
    retry can make old checkpoints fit new code."""


class JobTimeout(DeferqError):
    """A job ran past its timeout."""


class JobFailed(DeferqError):
    """`job.wait()` on a job that went dead or was cancelled: `job` is the job as stored,
    and `error` its last error."""

    def __init__(self, job: object, state: str, error: str | None) -> None:
        last = (error or "").strip().splitlines()[-1:] or ["no error recorded"]
        super().__init__(f"job {getattr(job, 'id', '?')} ended {state}: {last[0]}")
        self.job = job
        self.state = state
        self.error = error


def first_line(text: str | None) -> str:
    """The line of an error text that says the most: the last non-empty one."""
    if not text:
        return ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


class ChildFailed(DeferqError):
    """A child job of `job.gather` / `job.run_child` ended dead or cancelled (the first such
    child, by its place in the list): `step` the gather's name, `index` the child's place
    (from 0), `job_id` its id, `state` how it ended, `error` its last error, `failed` how
    many of the gather's children failed. The parent's run ends dead at once unless its
    task catches it: the children's ends are kept, so no retry of the parent changes them."""

    def __init__(self, step: str, index: int, job_id: str, state: str, error: str | None, failed: int = 1) -> None:
        last = (error or "").strip().splitlines()[-1:] or ["no error recorded"]
        others = f" ({failed} of its children failed)" if failed > 1 else ""
        super().__init__(f"child {index} of {step!r} (job {job_id}) ended {state}: {last[0]}{others}")
        self.step, self.index, self.job_id, self.state, self.error, self.failed = (
            step, index, job_id, state, error, failed)
