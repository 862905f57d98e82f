"""Logging a person can read, or JSON lines for machines (`--log-format json`)."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

from ..backends.base import Outcome, OutcomeKind
from ..errors import first_line
from ..job import Job
from ..middleware import Middleware

job_log = logging.getLogger("deferq.jobs")

_RESERVED = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message"}


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in _RESERVED})
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def setup_logging(level: str = "info", fmt: str = "text", stream=None) -> None:  # type: ignore[no-untyped-def]
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")
        )
    root = logging.getLogger("deferq")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False



class JobLog(Middleware):
    """One line per attempt a worker settled, on the `deferq.jobs` logger (installed by
    the App; silence it with `--log-level warning` or that logger's level). Its fields are
    JSON fields too. An outcome settled outside a worker (deferq.testing) has no line."""

    needs_settled_job = False  # reads the outcome only

    def after_settle(self, job: Job, outcome: Outcome, exc: BaseException | None) -> None:
        if outcome.ran is not None:
            report(outcome, outcome.ran)


def report(outcome: Outcome, seconds: float) -> None:
    if not job_log.isEnabledFor(_LEVELS.get(outcome.kind, logging.INFO)):
        return  # `--log-level warning`, say: no fields built per job
    job = outcome.job
    fields: dict[str, Any] = {"job_id": job.id, "task": job.task, "queue": job.queue,
                              "attempt": job.attempts, "duration_ms": round(seconds * 1000, 1)}
    if outcome.kind == OutcomeKind.SUCCEEDED:
        job_log.info("job %s %s succeeded in %.0f ms", job.id, job.task, seconds * 1000, extra=fields)
    elif outcome.kind == OutcomeKind.RETRY:
        fields["error"] = first_line(outcome.error)
        job_log.info("job %s %s failed (attempt %d/%d), retry in %.1fs: %s", job.id, job.task, job.attempts,
                     job.max_attempts, outcome.delay, fields["error"], extra=fields)
    elif outcome.kind == OutcomeKind.SNOOZE:
        job_log.debug("job %s %s snoozed for %.1fs (attempt not counted)", job.id, job.task, outcome.delay,
                      extra=fields)
    elif outcome.kind == OutcomeKind.CANCELLED:
        job_log.info("job %s %s cancelled while running", job.id, job.task, extra=fields)
    elif outcome.kind == OutcomeKind.DEAD:
        fields["error"] = first_line(outcome.error)
        job_log.warning("job %s %s is dead after %d attempt(s): %s", job.id, job.task, job.attempts,
                        fields["error"], extra=fields)


_LEVELS = {OutcomeKind.SNOOZE: logging.DEBUG, OutcomeKind.DEAD: logging.WARNING}  # report()'s, else INFO
