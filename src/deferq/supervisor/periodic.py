"""Periodic jobs: cron schedules that the master enqueues, once per tick however many masters run.

Schedules come from code (``@app.periodic("*/5 * * * *")``) and from the config file's
[periodic] table. Cron is evaluated in UTC on the store's clock; five fields as usual,
or six with seconds last ("*/10 * * * * *" = every ten seconds).

Each master computes the ticks itself. Before enqueueing tick T of schedule N it claims
``periodic/N:T`` in the store with ``kv_put(..., only_new=True)``: the first master wins,
the others skip. So any number of masters enqueue each tick exactly once, and a stopped
master is no single point of failure (Celery beat's best-known weakness).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from croniter import croniter

from ..errors import ConfigError
from ..task import JobOptions, Task
from .values import no_unknown_keys

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("deferq.periodic")

CATCH_UP = 300.0  # seconds: a tick missed for longer (no master was running) is skipped
GUARD_TTL = CATCH_UP * 2  # a claimed tick is remembered longer than any master looks back
JOB_OPTIONS = ("queue", "priority", "max_attempts", "timeout")
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
    app: App,
    cron: str,
    *,
    name: str | None = None,
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: dict[str, Any] | None = None,
    **options: Any,
) -> Callable[[Any], Task]:
    """The decorator behind ``App.periodic``: schedule a task (registering a plain
    function as a task first)."""

    def schedule(fn: Any) -> Task:
        task = fn if isinstance(fn, Task) else app.task(fn)
        job = PeriodicJob(name or task.name, cron, task.name, tuple(args), dict(kwargs or {}),
                          dict(options))  # fmt: skip
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
                                dict(entry.get("kwargs", {})), options))  # fmt: skip
    return tuple(jobs)


class PeriodicScheduler:
    """Enqueues the due ticks of a set of schedules; the master calls `run_due` in its loop."""

    def __init__(self, app: App, jobs: list[PeriodicJob] | tuple[PeriodicJob, ...], now: float):
        names = [job.name for job in jobs]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate is not None:
            raise ConfigError(f"two periodic jobs are named {duplicate!r}")
        self.app = app
        self.jobs = list(jobs)
        self.next_tick = {job.name: job.next_after(now) for job in self.jobs}

    def seconds_to_next(self, now: float) -> float | None:
        if not self.next_tick:
            return None
        return max(0.0, min(self.next_tick.values()) - now)

    def run_due(self, now: float) -> int:
        """Enqueue every due tick this master wins; return how many it enqueued.

        Store errors propagate: the tick stays due and is tried again on the next call.
        """
        enqueued = 0
        for job in self.jobs:
            tick = self.next_tick[job.name]
            while tick <= now:
                if now - tick <= CATCH_UP and self._enqueue_once(job, tick):
                    enqueued += 1
                tick = self.next_tick[job.name] = job.next_after(tick)
        return enqueued

    def _enqueue_once(self, job: PeriodicJob, tick: float) -> bool:
        claim = f"{job.name}:{tick:.0f}"
        backend = self.app.backend
        if not backend.kv_put("periodic", claim, b"1", ttl=GUARD_TTL, only_new=True):
            return False  # another master enqueued this tick
        try:
            self.app.enqueue(job.task, job.args, job.kwargs, key=f"periodic:{claim}", **job.options)
        except BaseException:
            backend.kv_delete("periodic", claim)  # let this or another master try again
            raise
        log.info("periodic %s: enqueued the %s tick", job.name, _utc(tick))
        return True


def _utc(moment: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(moment))
