"""Concurrency limits: ``@app.task(concurrency=5)``, per key with
``concurrency_key="customer:{customer_id}"``, or on a queue (``queue:NAME``).

A run takes a slot of each limit that holds for it (`slot_take` in the store, across
every worker and host) and gives it back after the run, whatever its outcome. A slot is
held by the run's job id and attempt, and granted with a fence, a number larger than
any granted before under the key.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..job import Job, JobState

if TYPE_CHECKING:
    from ..backends.base import Backend

log = logging.getLogger("deferq.limits")


def holder_of(job: Job) -> str:
    return f"{job.id}:{job.attempts}"


@dataclass
class HeldSlot:
    """The concurrency slot a run took, and the fence it was granted with."""

    backend: Backend
    key: str
    holder: str
    fence: int
    reported: bool = False  # its loss was logged (once: by the heartbeat or at the end)

    def held(self) -> bool:
        """Still ours: a holder whose run was declared over (its lease expired) is
        dropped by the next job of the key, and a later grant has a larger fence."""
        return self.backend.slot_holders(self.key).get(self.holder) == self.fence

    def report_lost(self, job: Job, when: str) -> None:
        if not self.reported:
            self.reported = True
            log.warning("job %s of task %s lost its concurrency slot %s (fence %d) %s; another job may "
                        "be running under the same key", job.id, job.task, self.key, self.fence, when)


def take_slot(backend: Backend, key: str, limit: int, job: Job) -> int:
    """A slot of the concurrency limit `key` for this run of `job`. Holders whose run
    is over (the job is no longer active with that attempt: finished, or its worker died
    and its lease expired) are dropped first, so no slot outlives its lease. A slot is
    a lease like any other: a worker frozen past its lease may still be running the
    job it lost. Its worker warns when it resumes (Worker._heartbeat), and the fence
    lets the systems the task writes to refuse the stale writer.
    Returns the slot's fence (0: all are taken)."""
    holder = holder_of(job)
    gone = [h for h in backend.slot_holders(key) if h != holder and not _runs(backend, h)]
    return backend.slot_take(key, limit, holder, gone)


def _runs(backend: Backend, holder: str) -> bool:
    job_id, _, attempt = holder.rpartition(":")
    job = backend.get(job_id)
    return job is not None and job.state == JobState.ACTIVE and str(job.attempts) == attempt
