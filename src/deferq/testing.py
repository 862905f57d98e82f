"""Helpers for users' own tests: eager mode, draining queues here, time travel, asserts.

- `App("memory://", eager=True)` (or `memory://?eager=1`) runs every task at enqueue,
  in the caller's thread, retrying at once until the job ends, and returns the finished
  job.
- `drain(app)` runs every job that is due, in the test's own thread, until none is;
  `travel(app, seconds)` moves a memory:// store's clock so delayed jobs come due.
- `enqueued(app, task)` lists waiting jobs; `assert_enqueued(app, task, *args)` finds one.
- `isolated(app)` points an existing App (your project's) at a fresh store for a test.

All of it goes through the public store contract (reserve, settle, get) and the
worker's own runner, so arguments are encoded and decoded as in production and
retries, hooks and middleware behave as in a worker. The pytest plugin
(`deferq.contrib.pytest_plugin`) offers these as fixtures.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from .attempt.chunk import run_chunk, run_chunk_async
from .attempt.progress import ProgressWriter
from .attempt.runner import run_async, run_sync
from .backends import open_backend
from .backends.base import Enqueue, Outcome, OutcomeKind
from .backends.memory import MemoryBackend
from .context import JobControl
from .errors import ConfigError
from .job import WAITING_STATES, Job, Priority, dumps, loads
from .middleware import Chain, Middleware
from .registry import Registry, TaskSpec
from .task import AppLike, Task

WORKER = "eager"


class EagerRunner(Middleware):
    """Runs each enqueued job to its end before `enqueue` returns. Delays are ignored: a
    unit test wants to see the outcome, not wait for it."""

    def __init__(self, app: AppLike[Registry]) -> None:
        self.app = app

    def before_enqueue(self, items: list[Enqueue]) -> list[Enqueue]:
        return [replace(item, delay=0.0, job=item.job.evolve(run_at=0.0)) for item in items]

    def after_enqueue(self, jobs: list[Job]) -> list[Job]:
        return [self._run_to_end(job) for job in jobs]

    def _run_to_end(self, job: Job) -> Job:
        backend = self.app.backend
        order = [job.priority, *(level for level in Priority.LEVELS if level != job.priority)]
        while (current := backend.get(job.id)) is not None and not current.state.finished:
            leased = backend.reserve([job.queue], 1, WORKER, self.app.lease, order)
            if not leased:
                return current  # held elsewhere (another worker's lease): nothing to run here
            for taken in leased:
                run_here(self.app, taken, retry_at_once=True)
        return backend.get(job.id) or job


def run_here(app: AppLike[Registry], job: Job, retry_at_once: bool = False) -> Outcome:
    """Run one leased job in this thread, as a worker does: the chain's hooks as it is
    claimed (a workflow step gets the results before it), the runner, the settle and the
    chain's settle hooks."""
    registry = app.registry
    progress = ProgressWriter(  # as in a worker: throttled
        lambda jobs: app.backend.record_progress(registry.chain.progress_to_store(jobs)))
    [(job, control)] = registry.chain.claimed([job], progress.report)
    spec = registry.spec_for(job)
    if spec.chunk is not None:  # a chunk task: a call of this one job
        [(outcome, exc)] = run_call(spec, [(job, control)], registry.chain)
    elif spec.is_async:
        outcome, exc = asyncio.run(run_async(spec, job, registry.chain, control))
    else:
        outcome, exc = run_sync(spec, job, registry.chain, control)
    written = threading.Event()
    progress.finish(job.id, written.set)  # its last report is stored before its outcome
    written.wait()
    if retry_at_once and outcome.kind == OutcomeKind.RETRY:
        outcome = Outcome(job, OutcomeKind.RETRY, delay=0.0, error=outcome.error)
    if app.backend.settle(registry.chain.to_store([outcome])) == [True]:
        registry.chain.settled([(outcome, exc)])
    return outcome


def run_call(spec: TaskSpec, jobs: list[tuple[Job, JobControl]], chain: Chain) -> list[tuple[Outcome, Any]]:
    """A chunk task's call in this thread (an async one on an event loop of its own)."""
    if spec.is_async:
        return asyncio.run(run_chunk_async(spec, jobs, chain, spec.timeout))
    return run_chunk(spec, jobs, chain)


def drain(app: AppLike[Registry], queues: Sequence[str] | None = None, limit: int = 10_000) -> list[Job]:
    """Run every job that is due now, here, until none is (retries that come due at
    once run too). Returns the jobs as they ended up, in the order they ran."""
    backend = app.backend
    names = list(queues or _queues(app))
    ran: list[str] = []
    while len(ran) < limit and (leased := backend.reserve(names, 100, WORKER, app.lease, Priority.LEVELS)):
        calls: dict[str, list[Job]] = {}  # a chunk task's jobs of this lease: its calls
        for job in leased:
            spec = app.registry.spec_for(job)
            if spec.chunk is None:
                run_here(app, job)
            else:
                calls.setdefault(job.task, []).append(job)
            ran.append(job.id)
        for jobs in calls.values():
            size = app.registry.spec_for(jobs[0]).chunk.size  # type: ignore[union-attr]
            for start in range(0, len(jobs), size):
                run_chunk_here(app, jobs[start:start + size])
    return app.runtime.held([found for job_id in ran if (found := backend.get(job_id)) is not None])


def run_chunk_here(app: AppLike[Registry], jobs: list[Job]) -> list[Outcome]:
    """One call of a chunk task with these leased jobs, in this thread, as a worker makes it."""
    registry = app.registry
    claimed = registry.chain.claimed(jobs)
    ran = run_call(registry.spec_for(jobs[0]), claimed, registry.chain)
    outcomes = [outcome for outcome, _ in ran]
    applied = app.backend.settle(registry.chain.to_store(outcomes))
    if settled := [pair for pair, ok in zip(ran, applied, strict=True) if ok]:
        registry.chain.settled(settled)
    return outcomes


def travel(app: AppLike[Registry], seconds: float) -> None:
    """Move the store's clock `seconds` forward (memory:// only): delayed jobs and
    retries with backoff come due for the next `drain`."""
    backend = app.backend
    if not isinstance(backend, MemoryBackend):
        raise ConfigError("time travel needs a memory:// store (testing.isolated(app) gives one)")
    backend.advance(seconds)


def enqueued(app: AppLike[Registry], task: Task[..., Any] | str | None = None) -> list[Job]:
    """Jobs waiting to run (scheduled or queued), oldest first, of one task or all."""
    name = task.name if isinstance(task, Task) else task
    jobs = app.runtime.held([job for state in WAITING_STATES
                             for job in app.backend.list_jobs(state, None, 100_000)])
    return sorted((j for j in jobs if name is None or j.task == name), key=lambda j: (j.created_at, j.id))


def assert_enqueued(app: AppLike[Registry], task: Task[..., Any] | str, *args: Any, **kwargs: Any) -> Job:
    """The waiting job of `task` with these arguments (compared as the worker will see
    them, after JSON); an AssertionError listing what is waiting if there is none."""
    wanted = loads(dumps([list(args), kwargs], "the expected arguments"))
    waiting = enqueued(app, task)
    for job in waiting:
        if [list(job.args), job.kwargs] == wanted:
            return job
    shown = ", ".join(f"{j.task}{tuple(j.args)!r} {j.kwargs or ''}".strip() for j in waiting) or "nothing"
    raise AssertionError(f"no waiting job {wanted!r} of {getattr(task, 'name', task)}; waiting: {shown}")


@contextmanager
def isolated(app: AppLike[Registry], url: str = "memory://") -> Iterator[AppLike[Registry]]:
    """Point `app` (with its tasks) at a fresh store for the duration of a test (its
    runtime's store is swapped, then put back)."""
    runtime = app.runtime
    saved = runtime.use_store(open_backend(url))
    try:
        yield app
    finally:
        runtime.backend.close()
        runtime.use_store(saved)


def _queues(app: AppLike[Registry]) -> set[str]:
    return {task.defaults.queue for task in app.tasks.values()} | set(app.backend.stats())
