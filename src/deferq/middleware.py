"""Middleware: code that runs around every job without editing the worker.

Subclass `Middleware`, override the hooks you need, and add it with
`app.add_middleware(MyMiddleware())`. Error reporting, connection clean-up, metrics,
tracing and rate limits are plug-ins of this kind; so are `app.on(...)` and a task's
`on_success` / `on_failure` (see registry.EventHooks).

- `before_enqueue(items)` / `after_enqueue(jobs)`: in the producer, around the store
  call; each returns the (possibly changed) list it was given, in registration order.
  Every enqueue goes through them: `task.enqueue`, `app.enqueue_many` and its async
  twin, workflows, batches and the HTTP API's `POST /v1/jobs` (`Chain.enqueue`).
- `after_store(items, jobs)`: right after the store call, before any `after_enqueue`,
  with the items as stored and the jobs the store answered, pair by pair (a unique key
  may answer the job that already held it: `backend.is_new(item, job)` tells).
- `before_run(job)`: in the thread (or event loop) that runs the task, just before it.
  Raising `deferq.Retry` puts the job back without running it (the attempt counted),
  `deferq.Snooze(delay)` puts it back for `delay` seconds with the attempt not counted
  (how a limit says "not yet"); any other exception is logged and ignored.
- `after_run(job, outcome, exc)`: right after the task, same thread, before settling.
- `after_settle(job, outcome, exc)`: after the store recorded the outcome (only when it
  applied: a job whose lease was lost is not reported); `job` shows the new state.

After-hooks run in reverse order of registration, like unwinding a stack. A failing hook
is logged and isolated: it never fails the job or stops the other hooks (the enqueue
hooks excepted: their error is the enqueue's). Hooks that a middleware does not override
cost nothing: `Chain` keeps only the overridden ones.

The App installs its own first, so they run before every other before-hook and after
every other after-hook: batch joining (flows/batch.BatchJoin), the per-minute history
(observe/history.History), the per-job log line (observe/logs.JobLog), the attempts of
jobs that failed (observe/attempts.Attempts) and run-time limits (limits/limiter.py Limits).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from .backends.base import Outcome, OutcomeKind
from .errors import Retry, Snooze
from .job import Job, JobState

if TYPE_CHECKING:
    from .backends.base import Enqueue

log = logging.getLogger("deferq.middleware")

HOOKS = ("before_enqueue", "after_store", "after_enqueue", "before_run", "after_run", "after_settle")


class Middleware:
    """Every hook does nothing; override the ones you need."""

    # False: this middleware's after_settle reads only the outcome, never `job`, so the
    # chain need not build the settled job for it (a copy of the job per settled attempt)
    needs_settled_job = True

    def before_enqueue(self, items: list[Enqueue]) -> list[Enqueue]:
        return items

    def after_store(self, items: list[Enqueue], jobs: list[Job]) -> None:
        pass

    def after_enqueue(self, jobs: list[Job]) -> list[Job]:
        return jobs

    def before_run(self, job: Job) -> None:
        pass

    def after_run(self, job: Job, outcome: Outcome, exc: BaseException | None) -> None:
        pass

    def after_settle(self, job: Job, outcome: Outcome, exc: BaseException | None) -> None:
        pass


class Chain:
    """The registered middleware, as one list per hook of the methods really overridden."""

    def __init__(self) -> None:
        self.middleware: list[Middleware] = []
        self.before_enqueue: list[Callable[[list[Enqueue]], list[Enqueue]]] = []
        self.after_store: list[Callable[[list[Enqueue], list[Job]], None]] = []
        self.after_enqueue: list[Callable[[list[Job]], list[Job]]] = []
        self.before_run: list[Callable[[Job], None]] = []
        self.after_run: list[Callable[[Job, Outcome, BaseException | None], None]] = []
        self.after_settle: list[Callable[[Job, Outcome, BaseException | None], None]] = []
        self.settled_jobs = 0  # after_settle hooks that read the settled job (needs_settled_job)

    def add(self, middleware: Middleware) -> None:
        if not isinstance(middleware, Middleware):
            raise TypeError(f"middleware must subclass deferq.Middleware, got {middleware!r:.60}")
        self.middleware.append(middleware)
        for hook in HOOKS:
            if getattr(type(middleware), hook) is not getattr(Middleware, hook):
                bound = getattr(middleware, hook)
                methods: list[Any] = getattr(self, hook)
                # after-hooks unwind: the last registered runs first
                methods.insert(0, bound) if hook.startswith("after_") else methods.append(bound)
                self.settled_jobs += hook == "after_settle" and middleware.needs_settled_job

    # The producer's one sequence, sync and async: the before-hooks, the store, the
    # after-hooks. `store` is the store call (the App's, or the HTTP service's batcher).

    def enqueue(self, items: list[Enqueue], store: Callable[[list[Enqueue]], list[Job]]) -> list[Job]:
        items = self.run_before_enqueue(items)
        return self.run_after_enqueue(items, store(items))

    async def enqueue_async(self, items: list[Enqueue],
                            store: Callable[[list[Enqueue]], Awaitable[list[Job]]]) -> list[Job]:
        items = self.run_before_enqueue(items)
        return self.run_after_enqueue(items, await store(items))

    def run_before_enqueue(self, items: list[Enqueue]) -> list[Enqueue]:
        for hook in self.before_enqueue:
            items = hook(items)
        return items

    def run_after_enqueue(self, items: list[Enqueue], jobs: list[Job]) -> list[Job]:
        for stored in self.after_store:
            stored(items, jobs)
        for hook in self.after_enqueue:
            jobs = hook(jobs)
        return jobs

    def run_before_run(self, job: Job) -> None:
        for hook in self.before_run:
            try:
                hook(job)
            except (Retry, Snooze):
                raise
            except Exception:  # noqa: BLE001 - a failing hook is isolated
                _failed(hook, job)

    def run_after(self, hooks: Sequence[Callable[[Job, Outcome, BaseException | None], None]], job: Job,
                  outcome: Outcome, exc: BaseException | None) -> None:
        for hook in hooks:
            try:
                hook(job, outcome, exc)
            except Exception:  # noqa: BLE001 - a failing hook is isolated
                _failed(hook, job)


    def run_after_settle(self, outcome: Outcome, exc: BaseException | None) -> None:
        if self.after_settle:
            job = settled_view(outcome) if self.settled_jobs else outcome.job
            self.run_after(self.after_settle, job, outcome, exc)


def settled_view(outcome: Outcome) -> Job:
    """The job as `settle` left it: what after_settle hooks are shown."""
    job = outcome.job
    if outcome.kind == OutcomeKind.CANCELLED or (job.cancel_requested and outcome.kind != OutcomeKind.SUCCEEDED):
        return job.with_state(JobState.CANCELLED, error=outcome.error)
    if outcome.kind == OutcomeKind.SUCCEEDED:
        return job.with_state(JobState.SUCCEEDED, result=outcome.result)
    if outcome.kind == OutcomeKind.RETRY:
        return job.with_state(JobState.SCHEDULED, error=outcome.error)
    if outcome.kind == OutcomeKind.DEAD:
        return job.with_state(JobState.DEAD, error=outcome.error)
    if outcome.kind == OutcomeKind.SNOOZE:
        return job.with_state(JobState.SCHEDULED if outcome.delay > 0 else JobState.QUEUED,
                              attempts=job.attempts - 1)
    return job.with_state(JobState.QUEUED)


def _failed(hook: Callable[..., Any], job: Job) -> None:
    owner = getattr(hook, "__self__", None)
    name = f"{type(owner).__name__}.{hook.__name__}" if owner is not None else getattr(hook, "__name__", hook)
    log.exception("middleware %s failed for job %s (%s)", name, job.id, job.task)
