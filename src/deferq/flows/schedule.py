"""Periodic jobs as values: a cron schedule, the task it enqueues and that job's options.

They are defined in code (``@app.periodic("*/5 * * * *")``, which `App.periodic`
hands to `register_periodic`) or in the supervisor's config file ([periodic.NAME]
tables, read by `periodic_from_table`). This module only describes and checks them, so
an App can record its schedules without importing the supervisor; running them, once
per tick however many masters run, is `deferq.supervisor.periodic.PeriodicScheduler`.

Cron is evaluated in UTC on the store's clock; five fields as usual, or six with
seconds last ("*/10 * * * * *" = every ten seconds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from croniter import croniter

from ..errors import ConfigError
from ..options import PERIODIC_OPTIONS, JobOptions
from ..task import Runtime, Task
from ..values import no_unknown_keys

JOB_OPTIONS = PERIODIC_OPTIONS  # the job options a periodic job may set (deferq/options.py)
TABLE_KEYS = ("cron", "task", "args", "kwargs", *JOB_OPTIONS)


@dataclass(frozen=True)
class PeriodicJob:
    name: str
    cron: str
    task: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)  # queue, priority, max_attempts, timeout

    def __post_init__(self) -> None:
        if not isinstance(self.cron, str) or not croniter.is_valid(self.cron):
            raise ConfigError(f"periodic job {self.name!r} has an invalid cron expression {self.cron!r}")
        unknown = set(self.options) - set(JOB_OPTIONS)
        if unknown:
            raise ConfigError(
                f"periodic job {self.name!r} cannot set {sorted(unknown)[0]!r}: it takes {', '.join(JOB_OPTIONS)}"
            )
        try:
            JobOptions.parse(**self.options)
        except ValueError as exc:
            raise ConfigError(f"periodic job {self.name!r}: {exc}") from None

    def next_after(self, moment: float) -> float:
        """The first tick strictly after `moment` (epoch seconds, UTC)."""
        return float(croniter(self.cron, moment).get_next(float))


def register_periodic(
    app: Runtime[object],
    cron: str,
    *,
    name: str | None = None,
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: dict[str, Any] | None = None,
    **options: Any,
) -> Callable[[Any], Task[..., Any]]:
    """The decorator behind ``App.periodic``: schedule a task (registering a plain
    function as a task first)."""

    def schedule(fn: Any) -> Task[..., Any]:
        task = fn if isinstance(fn, Task) else app.task(fn)
        job = PeriodicJob(name or task.name, cron, task.name, tuple(args), dict(kwargs or {}),
                          dict(options))
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
            raise ConfigError(f"{where} must be a table with cron and task")
        no_unknown_keys(entry, TABLE_KEYS, where)
        for required in ("cron", "task"):
            if not isinstance(entry.get(required), str):
                raise ConfigError(f"{where} needs {required} (a string)")
        if not isinstance(entry.get("args", []), list):
            raise ConfigError(f"{where}.args must be a list")
        if not isinstance(entry.get("kwargs", {}), dict):
            raise ConfigError(f"{where}.kwargs must be a table")
        options = {key: entry[key] for key in JOB_OPTIONS if key in entry}
        jobs.append(PeriodicJob(name, entry["cron"], entry["task"], tuple(entry.get("args", [])),
                                dict(entry.get("kwargs", {})), options))
    return tuple(jobs)
