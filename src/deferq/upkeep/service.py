"""The upkeep service: every deferq process that lasts (a worker, a `deferq run` master,
a `deferq serve` process) starts one, the same way; the one that holds the leader lease
(leader.py) runs the store's sweeps (sweeps.py) and fires the schedules
(schedules/firing.py). The others only watch the lease, and take it over when it runs
out. What stays in each process is its own: a worker's heartbeats, its timeouts, its
limits.

Each process also writes the schedules its code declares (and a master its config
file's [periodic] tables) to the store at its start, leader or not.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from ..backends.guard import StoreGuard
from ..schedules.definition import PeriodicJob
from ..schedules.firing import Firer
from ..task import AppLike, Runtime
from .leader import LEASE, Leader
from .sweeps import Sweeps

log = logging.getLogger("deferq.upkeep")


class Upkeep:
    """One process's part in the store's upkeep: `start` it on a thread of its own (or
    call `step` from a loop), `stop` it at the end; `once` for a process that runs
    briefly (a --burst or --once worker: one sweep if no process leads, no schedules)."""

    def __init__(self, app: AppLike[object] | Runtime[object], holder: str,
                 config_schedules: Sequence[PeriodicJob] = (), lease: float | None = None) -> None:
        self.app, self.holder = app.runtime, holder  # the store, the settings, the enqueue pipeline
        # within the App's lease too: a dead leader's own jobs come back within 1.5 of them
        self.lease = lease or min(LEASE, app.lease)
        self._leader: Leader | None = None
        self.sweeps = Sweeps(app)
        self.firer = Firer(app, holder)
        self.leading = False
        self.next_round = 0.0  # when the firer's next round is due (monotonic)
        self.config_schedules, self.config_declared = tuple(config_schedules), False
        self.guard = StoreGuard(log, down="upkeep: the store cannot be reached, trying again: %s",
                                back="upkeep: the store answers again after %.1fs", down_level=logging.WARNING)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def leader(self) -> Leader:
        """The lease, on the store opened at first use (a server starts while its store is down)."""
        if self._leader is None:
            self._leader = Leader(self.app.backend, self.holder, self.lease)
        return self._leader

    def use_config_schedules(self, schedules: Sequence[PeriodicJob]) -> None:
        """The schedules of a config file (the master's [periodic] tables, checked by it),
        written to the store at the next step."""
        self.config_schedules, self.config_declared = tuple(schedules), False

    def step(self) -> float:
        """Declare the schedules (once), hold the lease, and while leading run what is due
        of the sweeps and of the schedules; the seconds until the next step. Store errors
        propagate (call again later)."""
        self.firer.declare()
        if not self.config_declared:
            self.firer.schedules.declare(self.config_schedules, "config")
            self.config_declared = True
        leading = self.leader.hold()
        if leading != self.leading:
            log.info("%s %s upkeep: sweeps and firing schedules", self.holder,
                     "now leads" if leading else "stopped leading")
            self.leading = leading
            self.sweeps.from_now()
            self.next_round = 0.0
        if not leading:
            return self.lease / 5
        now = time.monotonic()
        wait = min(self.lease / 3, self.sweeps.run_due(now))
        if now >= self.next_round:
            self.next_round = now + self.firer.step()
        return max(0.01, min(wait, self.next_round - now))

    def once(self) -> None:
        """One sweep, if no other process leads: taken, swept, given up."""
        try:
            if self.leader.hold():
                self.sweeps.run_due(time.monotonic())
                self.leader.release()
        except Exception as exc:  # noqa: BLE001 - the process goes on: the next leader sweeps
            log.warning("upkeep: the sweep at start failed: %s", exc)

    def run(self, stopping: threading.Event) -> None:
        """Step until `stopping` is set; the lease is given up at the end."""
        while not stopping.is_set():
            try:
                ok, wait = self.guard.call(self.step)
            except Exception:  # a bug in one round must not end every later one
                log.exception("upkeep: a round failed; trying again")
                ok, wait = True, self.lease / 5
            stopping.wait(wait if ok and wait is not None else max(self.guard.backoff(), self.lease / 5))
        self.guard.call(lambda: self.leader.release())

    def start(self, stopping: threading.Event | None = None) -> threading.Thread:
        """`run` on a thread of its own, until `stopping` (or `stop`)."""
        self._stopping = stopping or self._stopping
        self._thread = threading.Thread(target=self.run, args=(self._stopping,), name="deferq-upkeep",
                                        daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread `start` began (the lease given up)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
