"""Periodic jobs as values: when a schedule fires, the task it enqueues and that job's options.

They are declared in code (``@app.periodic("*/5 * * * *", tz="Europe/Berlin")``), in
the supervisor's config file ([periodic.NAME] tables, read by `periodic_from_table`),
or added at run time (`app.schedules`, `deferq schedule add`, PUT /v1/schedules/NAME).
This module only describes and checks them; the store keeps them (store.py) and
one elected process fires them (firing.py).

Timing: cron (five fields, or six with seconds first) read in `tz` (UTC by default; see
timing.py for daylight saving), or `every` N seconds (at least one). `jitter` delays
each tick's job by up to that many seconds. `missed` says what happens to ticks that
came due while no process fired schedules: "skip" (the default), "latest" or "all".
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from functools import cached_property
from typing import Any, ParamSpec, TypeVar

from ..errors import ConfigError
from ..options import PERIODIC_OPTIONS, JobOptions
from ..task import AppLike, Task
from ..values import no_unknown_keys, storable
from .timing import Timing

JOB_OPTIONS = PERIODIC_OPTIONS  # the job options a periodic job may set (deferq/options.py)
TIMING_KEYS = ("cron", "every", "tz", "jitter", "missed")
TABLE_KEYS = ("task", "args", "kwargs", *TIMING_KEYS, *JOB_OPTIONS)
MISSED = ("skip", "latest", "all")
P = ParamSpec("P")
R = TypeVar("R")
# A name is a store key ("schedules/NAME", 191 characters on MySQL) and part of each tick
# job's unique key ("schedule:NAME:TICK", at most 200): 150 leaves room on every store.
# No '/' (it names a record), no control character (a newline or tab splits a log line
# or a listing), no white space at either end (easily typed, never seen). The API's
# document gives this pattern as it is (JSON Schema's \s is this set of spaces).
MAX_NAME = 150
_SPACE = r"\t\n\v\f\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_NEVER = r"/\x00-\x1f\x7f-\x9f"
NAME_PATTERN = rf"^[^{_NEVER}{_SPACE}](?:[^{_NEVER}]{{0,{MAX_NAME - 2}}}[^{_NEVER}{_SPACE}])?$"
_NAME = re.compile(NAME_PATTERN)


def check_name(name: Any) -> str:
    """A schedule's name, or a ConfigError saying what a name may be."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or not storable(name):  # storable: no lone surrogate
        raise ConfigError(f"a schedule's name is 1 to {MAX_NAME} characters without '/' or control characters "
                          f"(newline, tab) and without spaces at either end, got {name!r:.80}")
    return name


def seconds(value: Any, what: str) -> float | None:
    """A duration given as seconds or a timedelta."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{what} must be seconds (a number) or a timedelta, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class PeriodicJob:
    name: str
    cron: str | None
    task: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)  # queue, priority, max_attempts, timeout
    every: float | None = None
    tz: str | None = None
    jitter: float = 0.0
    missed: str = "skip"

    def __post_init__(self) -> None:
        check_name(self.name)
        try:
            self.__dict__["timing"] = Timing(self.cron, self.every, self.tz)  # checked once and kept
        except ConfigError as exc:
            raise ConfigError(f"schedule {self.name!r}: {exc}") from None
        if not isinstance(self.jitter, int | float) or isinstance(self.jitter, bool) or not (
                0 <= self.jitter < 86400):
            raise ConfigError(f"schedule {self.name!r}: jitter must be 0 to 86400 seconds, got {self.jitter!r}")
        if self.missed not in MISSED:
            raise ConfigError(f"schedule {self.name!r}: missed must be one of {', '.join(MISSED)}, "
                              f"got {self.missed!r}")
        unknown = set(self.options) - set(JOB_OPTIONS)
        if unknown:
            raise ConfigError(
                f"schedule {self.name!r} cannot set {sorted(unknown)[0]!r}: it takes {', '.join(JOB_OPTIONS)}"
            )
        try:
            JobOptions.parse(**self.options)
        except ValueError as exc:
            raise ConfigError(f"schedule {self.name!r}: {exc}") from None

    @cached_property
    def timing(self) -> Timing:
        return Timing(self.cron, self.every, self.tz)

    def next_after(self, moment: float) -> float:
        """The first tick strictly after `moment` (epoch seconds)."""
        return self.timing.next_after(moment)

    def to_dict(self) -> dict[str, Any]:
        """The definition as JSON carries it (how the store keeps it)."""
        return {**asdict(self), "args": list(self.args)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PeriodicJob:
        no_unknown_keys(data, ("name", "task", "args", "kwargs", "options", *TIMING_KEYS), "schedule")
        return cls(data["name"], data.get("cron"), data["task"], tuple(data.get("args", ())),
                   dict(data.get("kwargs") or {}), dict(data.get("options") or {}), data.get("every"),
                   data.get("tz"), data.get("jitter", 0.0), data.get("missed", "skip"))


def make_schedule(name: str, task: str, args: Any = (), kwargs: Any = None, *, cron: str | None = None,
                  every: Any = None, tz: str | None = None, jitter: Any = 0.0, missed: str = "skip",
                  **options: Any) -> PeriodicJob:
    """A schedule from the keywords the Python API takes (durations as seconds or timedeltas)."""
    if not isinstance(args, list | tuple):
        raise ConfigError(f"schedule {name!r}: args must be a list")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ConfigError(f"schedule {name!r}: kwargs must be a table of names")
    return PeriodicJob(name, cron, task, tuple(args), dict(kwargs or {}), dict(options),
                       seconds(every, "every"), tz, seconds(jitter, "jitter") or 0.0, missed)


def register_periodic(
    app: AppLike[object],
    cron: str | None = None,
    *,
    name: str | None = None,
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: dict[str, Any] | None = None,
    **options: Any,
) -> Callable[[Callable[P, R]], Task[P, R]]:
    """The decorator behind ``App.periodic``: schedule a task (registering a plain
    function as a task first)."""

    def schedule(fn: Callable[P, R]) -> Task[P, R]:
        task: Task[P, R] = fn if isinstance(fn, Task) else app.task(fn)
        job = make_schedule(name or task.name, task.name, args, kwargs, cron=cron, **options)
        if any(existing.name == job.name for existing in app.periodic_jobs):
            raise ValueError(f"a periodic job named {job.name!r} is already registered")
        app.periodic_jobs.append(job)
        return task

    return schedule


def periodic_from_table(table: Any) -> tuple[PeriodicJob, ...]:
    """The config file's [periodic.NAME] tables."""
    if table is None:
        return ()
    if not isinstance(table, dict):
        raise ConfigError("periodic must be a table of [periodic.NAME] tables")
    jobs = []
    for name, entry in table.items():
        where = f"periodic.{name}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} must be a table with cron (or every) and task")
        no_unknown_keys(entry, TABLE_KEYS, where)
        if not isinstance(entry.get("task"), str):
            raise ConfigError(f"{where} needs task (a string)")
        if not isinstance(entry.get("cron", entry.get("every")), str | int | float):
            raise ConfigError(f"{where} needs cron (a string) or every (seconds)")
        if not isinstance(entry.get("args", []), list):
            raise ConfigError(f"{where}.args must be a list")
        if not isinstance(entry.get("kwargs", {}), dict):
            raise ConfigError(f"{where}.kwargs must be a table")
        keywords = {key: entry[key] for key in (*TIMING_KEYS, *JOB_OPTIONS) if key in entry}
        jobs.append(make_schedule(name, entry["task"], entry.get("args", []), entry.get("kwargs", {}),
                                  **keywords))
    return tuple(jobs)
