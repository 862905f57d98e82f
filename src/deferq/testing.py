"""Helpers for users' own tests: eager mode.

`App("memory://", eager=True)` (or `memory://?eager=1`) runs every task at enqueue, in
the caller's thread, retrying at once until the job ends, and returns the finished job.
It is a middleware over the public store contract (reserve, settle, get), so eager jobs
go through the same runner, retry policy and hooks as a worker's.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Protocol

from .backends.base import Backend, Enqueue, Outcome, OutcomeKind
from .job import Job, Priority
from .middleware import Middleware
from .registry import Registry
from .worker.runner import run_async, run_sync

WORKER = "eager"


class EagerApp(Protocol):
    """What eager mode needs of an App."""

    @property
    def backend(self) -> Backend: ...

    registry: Registry
    lease: float


class EagerRunner(Middleware):
    """Runs each enqueued job to its end before `enqueue` returns. Delays are ignored: a
    unit test wants to see the outcome, not wait for it."""

    def __init__(self, app: EagerApp) -> None:
        self.app = app

    def before_enqueue(self, items: list[Enqueue]) -> list[Enqueue]:
        return [replace(item, delay=0.0, job=item.job.evolve(run_at=0.0)) for item in items]

    def after_enqueue(self, jobs: list[Job]) -> list[Job]:
        return [self._run_to_end(job) for job in jobs]

    def _run_to_end(self, job: Job) -> Job:
        backend, registry = self.app.backend, self.app.registry
        order = [job.priority, *(level for level in Priority.LEVELS if level != job.priority)]
        while (current := backend.get(job.id)) is not None and not current.state.finished:
            leased = backend.reserve([job.queue], 1, WORKER, self.app.lease, order)
            if not leased:
                return current  # held elsewhere (another worker's lease): nothing to run here
            for taken in leased:
                spec = registry.spec_for(taken)
                if spec.is_async:
                    outcome, exc = asyncio.run(run_async(spec, taken, registry.chain))
                else:
                    outcome, exc = run_sync(spec, taken, registry.chain)
                if outcome.kind == OutcomeKind.RETRY:
                    outcome = Outcome(taken, OutcomeKind.RETRY, delay=0.0, error=outcome.error)
                if backend.settle([outcome]) == [True]:
                    registry.chain.run_after_settle(outcome, exc)
        return backend.get(job.id) or job
