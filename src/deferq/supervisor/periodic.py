"""The master's part in firing schedules: it writes the config file's [periodic] tables
to the store and takes part in the election of the process that fires them.

Schedules are fired by whichever process holds the leader lease (deferq/schedules/firing.py):
this master, one of its workers or any other worker. Each tick is enqueued once however
many of them run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..schedules.definition import PeriodicJob
from ..schedules.firing import Firer

if TYPE_CHECKING:
    from ..app import App


class PeriodicScheduler:
    """Steps a `Firer` from the master's loop: `run_due` when `seconds_to_next` says so."""

    def __init__(self, app: App, config_jobs: tuple[PeriodicJob, ...], holder: str, now: float) -> None:
        names = [job.name for job in (*app.periodic_jobs, *config_jobs)]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate is not None:
            raise ConfigError(f"two periodic jobs are named {duplicate!r}")
        self.firer = Firer(app, holder)
        self.config_jobs, self.declared = config_jobs, False
        self.next_step = now

    def seconds_to_next(self, now: float) -> float:
        return max(0.0, self.next_step - now)

    def run_due(self, now: float) -> None:
        """One round of the firer when it is due. Store errors propagate: it is tried
        again at the master's next check."""
        if now < self.next_step:
            return
        if not self.declared:
            self.firer.schedules.declare(self.config_jobs, "config")
            self.declared = True
        self.next_step = now + self.firer.step()

    def close(self) -> None:
        """Give the leader lease up (a clean stop)."""
        self.firer.leader.release()
