"""Logging a person can read, or JSON lines for machines (`--log-format json`)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson

from ..backends.base import Outcome, OutcomeKind
from ..errors import first_line
from ..middleware import Middleware, Settled

job_log = logging.getLogger("deferq.jobs")

_RESERVED = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message"}


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": f"{_second(record.created)}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in _RESERVED})
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()

    def line(self, created: float, level: int, name: str, message: str, fields: dict[str, Any] | None) -> str:
        """What format() makes of a record without exception or stack, from its parts."""
        msecs = int((created - int(created)) * 1000)
        entry = {"time": f"{_second(created)}.{msecs:03d}Z", "level": logging.getLevelName(level).lower(),
                 "logger": name, "message": message, **(fields or {})}
        return orjson.dumps(entry, default=str).decode()


class _TextFormatter(logging.Formatter):
    """The text lines' formatter: the clock text is made once a second, not once a line
    (a worker at INFO writes a line per job)."""

    _at: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        second = int(record.created)
        if self._at[0] != second:
            self._at = (second, super().formatTime(record, datefmt))
        return self._at[1]

    def line(self, created: float, level: int, name: str, message: str, fields: dict[str, Any] | None) -> str:
        """What format() makes of a record without exception or stack, from its parts
        (`fields` are not shown in a text line)."""
        second = int(created)
        if self._at[0] != second:
            self._at = (second, time.strftime(self.datefmt or "%H:%M:%S", self.converter(created)))
        return f"{self._at[1]} {_LEVEL_NAMES.get(level) or f'{logging.getLevelName(level):<7}'} {name}: {message}"


_gm: tuple[int, str] = (-1, "")


def _second(created: float) -> str:
    """The UTC second of a JSON line's time, made once a second."""
    global _gm
    second = int(created)
    if _gm[0] != second:
        _gm = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return _gm[1]


_TEXT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
_LEVEL_NAMES = {level: f"{logging.getLevelName(level):<7}"  # a text line's, padded once
                for level in (logging.DEBUG, logging.INFO, logging.WARNING)}
_Lines = _TextFormatter | JSONFormatter
_direct: tuple[logging.StreamHandler[Any], _Lines] | None = None  # setup_logging's handler


def setup_logging(level: str = "info", fmt: str = "text", stream=None) -> None:  # type: ignore[no-untyped-def]
    global _direct
    handler = logging.StreamHandler(stream or sys.stderr)
    formatter: _TextFormatter | JSONFormatter
    formatter = JSONFormatter() if fmt == "json" else _TextFormatter(_TEXT, "%H:%M:%S")
    handler.setFormatter(formatter)
    root = logging.getLogger("deferq")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    _direct = (handler, formatter)


_deferq = logging.getLogger("deferq")


def _direct_handler() -> tuple[logging.StreamHandler[Any], _Lines] | None:
    """setup_logging's handler and formatter while they alone see a job's line (no
    filter, handler or formatter added since): then the line is written to its stream
    as that handler would, without a LogRecord."""
    if _direct is None or job_log.handlers or job_log.filters or not job_log.propagate:
        return None
    handler, formatter = _direct
    handlers = _deferq.handlers
    if (len(handlers) != 1 or handlers[0] is not handler or _deferq.filters or _deferq.propagate
            or handler.filters or handler.formatter is not formatter):
        return None
    return _direct



class JobLog(Middleware):
    """One line per attempt a worker settled, on the `deferq.jobs` logger (installed by
    the App; silence it with `--log-level warning` or that logger's level). Its fields are
    JSON fields too. An outcome settled outside a worker (deferq.testing) has no line."""

    def after_settle_many(self, settled: list[Settled]) -> None:
        """The batch's lines in one hook call (not a call per job through the chain). The
        logger's level is asked once a batch: under INFO (`--log-level warning`) only
        the dead's warnings are looked for, nothing at all under WARNING."""
        if not job_log.isEnabledFor(logging.INFO):
            if not job_log.isEnabledFor(logging.WARNING):
                return
            settled = [pair for pair in settled if pair[0].kind is OutcomeKind.DEAD]
        for outcome, _ in settled:
            if outcome.ran is not None:
                report(outcome, outcome.ran)


def report(outcome: Outcome, seconds: float) -> None:
    level = _LEVELS.get(outcome.kind, logging.INFO)
    if not job_log.isEnabledFor(level):
        return  # `--log-level warning`, say: nothing built per job
    job, kind = outcome.job, outcome.kind
    if kind == OutcomeKind.SUCCEEDED:
        _emit(level, "job %s %s succeeded in %.0f ms", (job.id, job.task, seconds * 1000), outcome, seconds)
    elif kind == OutcomeKind.RETRY:
        _emit(level, "job %s %s failed (attempt %d/%d), retry in %.1fs: %s",
              (job.id, job.task, job.attempts, job.max_attempts, outcome.delay, first_line(outcome.error)),
              outcome, seconds)
    elif kind == OutcomeKind.SNOOZE:
        _emit(level, "job %s %s snoozed for %.1fs (attempt not counted)", (job.id, job.task, outcome.delay),
              outcome, seconds)
    elif kind == OutcomeKind.CANCELLED:
        _emit(level, "job %s %s cancelled while running", (job.id, job.task), outcome, seconds)
    elif kind == OutcomeKind.DEAD:
        _emit(level, "job %s %s is dead after %d attempt(s): %s",
              (job.id, job.task, job.attempts, first_line(outcome.error)), outcome, seconds)


def _fields(outcome: Outcome, seconds: float) -> dict[str, Any]:
    """A job line's fields (JSON lines carry them; a text line does not)."""
    job = outcome.job
    fields: dict[str, Any] = {"job_id": job.id, "task": job.task, "queue": job.queue,
                              "attempt": job.attempts, "duration_ms": round(seconds * 1000, 1)}
    if outcome.kind in (OutcomeKind.RETRY, OutcomeKind.DEAD):
        fields["error"] = first_line(outcome.error)
    return fields


def _emit(level: int, message: str, args: tuple[Any, ...], outcome: Outcome, seconds: float) -> None:
    """`job_log.log(...)` without its search of the stack for the caller (half the cost
    of a line): a job's line always comes from here. With the CLI's logging as set up,
    the same line is written without a LogRecord (a third of the cost), and a text
    line without the fields only JSON shows."""
    direct = _direct_handler()
    if direct is not None and level >= direct[0].level:
        handler, formatter = direct
        fields = None if type(formatter) is _TextFormatter else _fields(outcome, seconds)
        line = formatter.line(time.time(), level, job_log.name, message % args, fields) + handler.terminator
        if _held is not None and _held[0] == threading.get_ident():
            _held[1].append(line)
            return
        if _write(handler, line):
            return
    job_log.handle(job_log.makeRecord(job_log.name, level, __file__, 0, message, args, None, "report",
                                      _fields(outcome, seconds)))


def _write(handler: logging.StreamHandler[Any], text: str) -> bool:
    try:
        with handler.lock:  # type: ignore[union-attr]
            handler.stream.write(text)
            handler.flush()
        return True
    except Exception:  # noqa: BLE001 - a closed stream, say: the logging module reports it
        return False


_held: tuple[int, list[str]] | None = None  # the thread holding its job lines, and them


@contextmanager
def lines_together() -> Iterator[None]:
    """The job lines this thread writes inside are written at the end, in one write (a
    worker's settle batch). Outside the CLI's logging, or on another thread, they are
    written as they come."""
    global _held
    if _held is not None or _direct is None:
        yield
        return
    _held = (threading.get_ident(), [])
    try:
        yield
    finally:
        lines, _held = _held[1], None
        if lines:
            _write(_direct[0], "".join(lines))


_LEVELS = {OutcomeKind.SNOOZE: logging.DEBUG, OutcomeKind.DEAD: logging.WARNING}  # report()'s, else INFO
