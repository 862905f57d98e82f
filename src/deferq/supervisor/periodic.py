"""Running periodic jobs: the master enqueues each tick, once however many masters run.

The schedules themselves (`PeriodicJob`, from code or from the config file's
[periodic] tables) are defined in deferq/flows/schedule.py; this module only runs them.

Each master computes the ticks itself. Before enqueueing tick T of schedule N it claims
``periodic/N:T`` in the store with ``kv_put(..., only_new=True)``: the first master wins,
the others skip. So any number of masters enqueue each tick exactly once, and a stopped
master is no single point of failure (Celery beat's best-known weakness).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..flows.schedule import PeriodicJob

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("deferq.periodic")

CATCH_UP = 300.0  # seconds: a tick missed for longer (no master was running) is skipped
GUARD_TTL = CATCH_UP * 2  # a claimed tick is remembered longer than any master looks back


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
