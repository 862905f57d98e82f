"""Store upkeep in the master: recover expired leases, promote due jobs, purge old results.

Workers do the same while they run; the master keeps it going when a pool is scaled to
zero or every child is down. Each sweep is claimed in the store for its interval
(`kv_put(..., only_new=True)`), so with several masters one of them does it; the
operations themselves are atomic, so even a doubled sweep would be harmless.
"""

from __future__ import annotations

import time

from ..app import App
from ..job import JobState
from .monitor import StoreHealth

SWEEP_EVERY = 5.0  # seconds between lease recovery and promotion sweeps
PURGE_EVERY = 60.0  # seconds between purges of finished jobs past the result retention


class Maintenance:
    def __init__(self, app: App, health: StoreHealth) -> None:
        self.app = app
        self.health = health
        self.next_sweep = self.next_purge = time.monotonic()

    def run(self, now: float) -> None:
        backend = self.app.backend
        if now >= self.next_sweep:
            self.next_sweep = now + SWEEP_EVERY
            if self._claim("sweep", SWEEP_EVERY):
                self.health.call(backend.recover_expired)
                self.health.call(backend.promote_due)
        if now >= self.next_purge:
            self.next_purge = now + PURGE_EVERY
            if self._claim("purge", PURGE_EVERY):
                finished = [JobState.SUCCEEDED, JobState.CANCELLED]
                self.health.call(backend.purge, finished, self.app.result_ttl)

    def _claim(self, what: str, ttl: float) -> bool:
        ok, claimed = self.health.call(self.app.backend.kv_put, "maintenance", what, b"1", ttl * 0.9, True)
        return bool(ok and claimed)
