"""Durable steps as a plug-in every App installs (the worker and deferq.testing know
nothing of them): the checkpoints a claim did not bring are read for the batch at once,
a run makes its `JobSteps` when it first reaches a step, and after a settle the batch's
ended checkpoints expire and waits answered while they settled wake (one store call each
a batch). A job that reaches no step enters none of it: the chain's tests of the record
(`claims`, `settles`) skip the hooks for its batch."""

from __future__ import annotations

from collections.abc import Callable

from ..backends.base import Backend, with_steps
from ..job import Job, uncarried
from ..middleware import Middleware, Settled
from .checkpoints import JobSteps, expire_ended, wake_answered


class Steps(Middleware):
    """`store`: the App's store, opened when first needed; `lease`: what a step's fenced
    write renews; `keep`: how long ended checkpoints are kept (the App's result_ttl)."""

    needs_settled_job = False
    claims = staticmethod(uncarried)
    settles = staticmethod(with_steps)

    def __init__(self, store: Callable[[], Backend], lease: float, keep: float) -> None:
        self.store, self.lease, self.keep = store, lease, keep

    def after_claim(self, jobs: list[Job]) -> list[Job]:
        self.store().with_checkpoints(jobs)  # their checkpoints: none read in their runs
        return jobs

    def steps_for(self, job: Job) -> JobSteps:
        return JobSteps(self.store(), self.lease, self.keep, job)

    def after_settle_many(self, settled: list[Settled]) -> None:
        store = self.store()
        expire_ended(store, (outcome for outcome, _ in settled))
        wake_answered(store, settled)
