"""The store's sweeps, run by the upkeep leader alone (service.py):

- recover, every half of the App's lease (at least 0.5 s): leases that expired (their
  worker died or froze) go back to waiting, or to dead when their attempts are used up
  (`recover_expired`; it is also where a store catches up on what it left for later: the
  jobs waiting behind a holder that ended, SQLite's text index); then `promote_due`,
  for a store that keeps due-later jobs apart from due ones (none does now: it is 0, or
  a ping on Redis);
- purge, every minute: succeeded and cancelled jobs older than the App's `result_ttl`
  (dead jobs are kept for inspection).

Each is atomic in the store job by job, so a sweep done twice (a leader that froze past
its lease and woke beside the next one) changes nothing more.
"""

from __future__ import annotations

from ..job import JobState
from ..task import AppLike, Runtime

PURGE_EVERY = 60.0  # seconds between purges of finished jobs past the result retention
FINISHED = (JobState.SUCCEEDED, JobState.CANCELLED)


class Sweeps:
    """What is due of the sweeps, on the App's store (opened at first use)."""

    def __init__(self, app: AppLike[object] | Runtime[object]) -> None:
        self.app = app.runtime  # the store, the tasks, the settings, the enqueue pipeline
        self.recover_every = max(app.lease / 2, 0.5)
        self.next_recover = self.next_purge = 0.0

    def from_now(self) -> None:
        """Every sweep is due now: a process that just became leader sweeps at once."""
        self.next_recover = self.next_purge = 0.0

    def run_due(self, now: float) -> float:
        """Run the sweeps due at `now` (monotonic seconds); the seconds until the next.
        A store error propagates, and what it interrupted is due again."""
        backend = self.app.backend
        if now >= self.next_recover:
            backend.recover_expired()
            backend.promote_due()
            self.next_recover = now + self.recover_every
        if now >= self.next_purge:
            backend.purge(FINISHED, self.app.result_ttl)
            self.next_purge = now + PURGE_EVERY
        return min(self.next_recover, self.next_purge) - now
