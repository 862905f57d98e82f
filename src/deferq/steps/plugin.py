"""Durable steps as a plug-in every App installs (the worker and deferq.testing know
nothing of them): the checkpoints a claim did not bring are read for the batch at once,
a run makes its `JobSteps` when it first reaches a step, and after a settle the batch's
ended checkpoints expire and waits answered while they settled wake (one store call each
a batch). A job that reaches no step enters none of it: the chain's tests of the record
(`claims`, `settles`) skip the hooks for its batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backends.base import Backend, with_steps
from ..job import Job, uncarried
from ..middleware import Middleware, Settled
from ..task import Runtime
from .checkpoints import expire_ended, wake_answered
from .children import DurableJob
from .undo import Sweep


class Steps(Middleware):
    """`store`: the App's store, opened when first needed; `lease`: what a step's fenced
    write renews; `keep`: how long ended checkpoints are kept (the App's result_ttl);
    `runtime`: the App's, through which a job's child jobs are stored (steps/children.py)."""

    needs_settled_job = False
    claims = staticmethod(uncarried)
    settles = staticmethod(with_steps)

    def __init__(self, store: Callable[[], Backend], lease: float, keep: float,
                 runtime: Runtime[Any] | None = None) -> None:
        self.store, self.lease, self.keep, self.runtime = store, lease, keep, runtime
        self.sweep = Sweep()

    def after_claim(self, jobs: list[Job]) -> list[Job]:
        self.store().with_checkpoints(jobs)  # their checkpoints: none read in their runs
        return jobs

    def steps_for(self, job: Job) -> DurableJob:
        return DurableJob(self.store(), self.lease, self.keep, job, self.runtime)

    def after_settle_many(self, settled: list[Settled]) -> None:
        store = self.store()
        expire_ended(store, (outcome for outcome, _ in settled))
        wake_answered(store, settled)

    def worker_tick(self) -> None:
        """Every few seconds: jobs a killed worker left mid-compensation are queued again."""
        self.sweep.tick(self.store())
