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
- `after_claim(jobs)`: in the consumer (a worker, `deferq.testing`), right after the
  store leased `jobs`, before any of them runs; returns the jobs as their tasks will see
  them (the same number, in the same order): a plug-in fills in what the record alone
  does not hold, such as a workflow step's inputs or a durable job's checkpoints.
- `before_run(job)`: in the thread (or event loop) that runs the task, just before it.
  Raising `deferq.Retry` puts the job back without running it (the attempt counted),
  `deferq.Snooze(delay)` puts it back for `delay` seconds with the attempt not counted
  (how a limit says "not yet"); any other exception is logged and ignored.
- `after_run(job, outcome, exc)`: right after the task, same thread, before settling.
- `after_chunk(jobs, seconds)`: after one call of a chunk task (deferq.chunks), same
  thread, with the jobs whose items the function got and how long the call ran; each
  job's own `before_run` / `after_run` come before and after it.
- `after_settle_many(settled)`: after the store recorded a batch of outcomes, once per
  batch (one store call for the batch, where a plug-in needs one), with the
  `(outcome, exc)` pairs that applied; before their `after_settle` hooks.
- `after_settle(job, outcome, exc)`: after the store recorded the outcome (only when it
  applied: a job whose lease was lost is not reported); `job` shows the new state.
- `worker_tick()` / `worker_stopped()`: a worker's, not a job's: from its keeper a few
  times a second (a plug-in's housekeeping, such as reading the store's limits again),
  and once as it stops (what a plug-in buffers is written). Called idle or not.
- `steps_for(job)`: not a hook but a service: the durable steps of a running job (a
  `context.Checkpoints`), made when its task first reaches `current_job().step(...)`,
  a sleep or a wait. deferq's own `steps.Steps` provides it; the last one added wins.

A plug-in for a feature few jobs use need not cost the others anything:
- `claims(job)` / `settles(outcome)`: tests of the record (no store call, best a C
  function such as `operator.attrgetter`) that say which jobs a plug-in's
  `after_claim` / `after_settle_many` concerns. When set, the chain calls the hook only
  for a batch where one passes (the hook still gets the whole batch).
- `idle` (a property or attribute): True while the plug-in has nothing to do for any
  job; the chain then skips all its hooks. A plug-in whose answer changes (a limit set
  at run time) calls `chain.changed()` to have the chain look again.

After-hooks run in reverse order of registration, like unwinding a stack. A failing hook
is logged and isolated: it never fails the job or stops the other hooks (the enqueue
hooks excepted: their error is the enqueue's). Hooks that a middleware does not override
cost nothing: `Chain` keeps only the overridden ones.

The App installs its own first, so they run before every other before-hook and after
every other after-hook: batch joining (flows/batch.BatchJoin), the per-minute history
(observe/history.History), the per-job log line (observe/logs.JobLog), the attempts of
jobs that failed (observe/attempts.Attempts), run-time limits (limits/limiter.py Limits), durable
steps (steps.Steps) and a workflow step's inputs (flows/chains.Inputs). So the worker
and `deferq.testing` know none of these features: they call the chain, the same
sequence for both (`claimed`, the runner's `run_sync` / `run_async`, `settled`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from .backends.base import Outcome, OutcomeKind
from .context import Checkpoints, JobControl, Reporter
from .errors import Retry, Snooze
from .job import Job, JobState

if TYPE_CHECKING:
    from .backends.base import Enqueue
    from .encryption import Sealer

log = logging.getLogger("deferq.middleware")

HOOKS = ("before_enqueue", "after_store", "after_enqueue", "after_claim", "before_run", "after_run",
         "after_chunk", "after_settle_many", "after_settle")
Settled = tuple[Outcome, "BaseException | None"]  # an outcome the store recorded, and the run's exception


class Middleware:
    """Every hook does nothing; override the ones you need."""

    # False: this middleware's after_settle reads only the outcome, never `job`, so the
    # chain need not build the settled job for it (a copy of the job per settled attempt)
    needs_settled_job = True
    # The jobs its after_claim concerns, the outcomes its after_settle_many concerns (a test
    # of the record, no store call): the chain calls the hook only for a batch where one
    # passes. None: every batch.
    claims: Callable[[Job], Any] | None = None
    settles: Callable[[Outcome], Any] | None = None
    # True while it has nothing to do for any job: the chain skips its hooks (the after_run
    # of a run that raised excepted); one whose answer changes calls `chain.changed()`.
    idle = False

    def before_enqueue(self, items: list[Enqueue]) -> list[Enqueue]:
        return items

    def after_store(self, items: list[Enqueue], jobs: list[Job]) -> None:
        pass

    def after_enqueue(self, jobs: list[Job]) -> list[Job]:
        return jobs

    def after_claim(self, jobs: list[Job]) -> list[Job]:
        return jobs

    def before_run(self, job: Job) -> None:
        pass

    def after_run(self, job: Job, outcome: Outcome, exc: BaseException | None) -> None:
        pass

    def after_chunk(self, jobs: list[Job], seconds: float) -> None:
        pass

    def after_settle_many(self, settled: list[Settled]) -> None:
        pass

    def after_settle(self, job: Job, outcome: Outcome, exc: BaseException | None) -> None:
        pass

    def worker_tick(self) -> None:
        pass

    def worker_stopped(self) -> None:
        pass

    def steps_for(self, job: Job) -> Checkpoints:
        """The durable steps of a running job (steps.Steps provides them)."""
        raise NotImplementedError


class Chain:
    """The registered middleware, as one list per hook of the methods really overridden
    (of the plug-ins not idle: `changed` builds them again)."""

    def __init__(self) -> None:
        self.middleware: list[Middleware] = []
        self.before_enqueue: list[Callable[[list[Enqueue]], list[Enqueue]]] = []
        self.after_store: list[Callable[[list[Enqueue], list[Job]], None]] = []
        self.after_enqueue: list[Callable[[list[Job]], list[Job]]] = []
        self.after_claim: list[tuple[Callable[[list[Job]], list[Job]], Callable[[Job], Any] | None]] = []
        self.before_run: list[Callable[[Job], None]] = []
        self.after_run: list[Callable[[Job, Outcome, BaseException | None], None]] = []
        self.after_raised: list[Callable[[Job, Outcome, BaseException | None], None]] = []  # idle ones too
        self.after_chunk: list[Callable[[list[Job], float], None]] = []
        self.after_settle_many: list[tuple[Callable[[list[Settled]], None], Callable[[Outcome], Any] | None]] = []
        self.after_settle: list[Callable[[Job, Outcome, BaseException | None], None]] = []
        self.settled_jobs = 0  # after_settle hooks that read the settled job (needs_settled_job)
        self.steps_for: Callable[[Job], Checkpoints] | None = None  # the durable steps' maker, if any
        # the App's encryption at rest (encryption/jobs.py), if it declares one: it seals what
        # goes to the store after every before-hook, and opens claimed jobs before every after_claim
        self.sealer: Sealer | None = None
        self._building = threading.RLock()  # one `changed` at a time (a plug-in's may come from any thread)

    def add(self, middleware: Middleware) -> None:
        if not isinstance(middleware, Middleware):
            raise TypeError(f"middleware must subclass deferq.Middleware, got {middleware!r:.60}")
        self.middleware.append(middleware)
        self.changed()

    def changed(self) -> None:
        """Build the hook lists again: a plug-in was added, or became idle or busy. Each
        list is replaced whole, so a thread running hooks meanwhile finishes on the old one."""
        with self._building:
            self._build()

    def _build(self) -> None:
        lists: dict[str, list[Any]] = {hook: [] for hook in (*HOOKS, "after_raised")}
        settled_jobs, steps_for = 0, None
        for middleware in self.middleware:
            kind = type(middleware)
            if kind.steps_for is not Middleware.steps_for:
                steps_for = middleware.steps_for
            idle = middleware.idle
            for hook in HOOKS:
                if getattr(kind, hook) is getattr(Middleware, hook):
                    continue
                bound: Any = getattr(middleware, hook)
                if hook == "after_claim":
                    bound = (bound, middleware.claims)
                elif hook == "after_settle_many":
                    bound = (bound, middleware.settles)
                # after-hooks unwind: the last registered runs first
                targets = [lists[hook]] if not idle else []
                if hook == "after_run":
                    targets.append(lists["after_raised"])
                for methods in targets:
                    methods.insert(0, bound) if hook.startswith("after_") else methods.append(bound)
                settled_jobs += hook == "after_settle" and middleware.needs_settled_job and not idle
        for hook, methods in lists.items():
            setattr(self, hook, methods)
        self.settled_jobs, self.steps_for = settled_jobs, steps_for

    # The producer's one sequence, sync and async: the before-hooks, the store, the
    # after-hooks. `store` is the store call (the App's, or the HTTP service's batcher).

    def enqueue(self, items: list[Enqueue], store: Callable[[list[Enqueue]], list[Job]]) -> list[Job]:
        items = self.run_before_enqueue(items)
        if self.sealer is None:
            return self.run_after_enqueue(items, store(items))
        sealed = self.sealer.seal_items(items)  # the store keeps them sealed; the hooks see them plain
        return self.run_after_enqueue(items, self.sealer.as_given(items, sealed, store(sealed)))

    async def enqueue_async(self, items: list[Enqueue],
                            store: Callable[[list[Enqueue]], Awaitable[list[Job]]]) -> list[Job]:
        items = self.run_before_enqueue(items)
        if self.sealer is None:
            return self.run_after_enqueue(items, await store(items))
        sealed = self.sealer.seal_items(items)
        return self.run_after_enqueue(items, self.sealer.as_given(items, sealed, await store(sealed)))

    def to_store(self, outcomes: list[Outcome]) -> list[Outcome]:
        """Outcomes as the store keeps them: sealed when the App encrypts (the hooks see
        the plain ones)."""
        return outcomes if self.sealer is None else self.sealer.seal_outcomes(outcomes)

    def progress_to_store(self, jobs: Sequence[Job]) -> Sequence[Job]:
        return jobs if self.sealer is None else self.sealer.seal_progress(jobs)

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

    # The consumer's sequence, the same for a worker and deferq.testing: `claimed` as the
    # store leased jobs, the runner (attempt/runner.py) around each run, `settled` once
    # the store recorded a batch of outcomes.

    def claimed(self, jobs: list[Job], report: Reporter | None = None
                ) -> list[tuple[Job, JobControl]]:
        """Leased jobs as their tasks will see them (the after_claim hooks), each with the
        control its run reports progress through and makes its durable steps with."""
        if not jobs:
            return []
        if self.sealer is not None:  # the tasks and every hook see the arguments opened
            jobs = self.sealer.open_claimed(jobs)
        for hook, claims in self.after_claim:
            if claims is None or any(map(claims, jobs)):
                try:
                    jobs = hook(jobs)
                except Exception:  # noqa: BLE001 - a failing hook is isolated
                    _failed(hook, jobs[0])
        steps_for = self.steps_for
        return [(job, JobControl(report, steps_for)) for job in jobs]

    def settled(self, settled: list[Settled]) -> None:
        """The store recorded these outcomes: the after_settle_many hooks once, then the
        after_settle hooks of each."""
        outcomes: list[Outcome] | None = None  # read off the pairs once, for every test
        for many, settles in self.after_settle_many:
            if settles is not None:
                if outcomes is None:
                    outcomes = [outcome for outcome, _ in settled]
                if not any(map(settles, outcomes)):
                    continue
            try:
                many(settled)
            except Exception:  # noqa: BLE001 - a failing hook is isolated
                _failed(many, settled[0][0].job)
        if self.after_settle:
            for outcome, exc in settled:
                self.run_after_settle(outcome, exc)

    def worker_tick(self) -> None:
        """A worker's keeper ticked: every plug-in's `worker_tick`, idle or not (a store
        failure goes to the caller, which backs off)."""
        for middleware in self.middleware:
            if type(middleware).worker_tick is not Middleware.worker_tick:
                middleware.worker_tick()

    def worker_stopped(self) -> None:
        for middleware in self.middleware:
            if type(middleware).worker_stopped is not Middleware.worker_stopped:
                try:
                    middleware.worker_stopped()
                except Exception:  # noqa: BLE001 - a failing hook is isolated
                    log.exception("middleware %s failed as the worker stopped", type(middleware).__name__)

    def run_before_run(self, job: Job) -> None:
        for hook in self.before_run:
            try:
                hook(job)
            except (Retry, Snooze):
                raise
            except Exception:  # noqa: BLE001 - a failing hook is isolated
                _failed(hook, job)

    def run_after_chunk(self, jobs: list[Job], seconds: float) -> None:
        for hook in self.after_chunk:
            try:
                hook(jobs, seconds)
            except Exception:  # noqa: BLE001 - a failing hook is isolated
                _failed(hook, jobs[0])

    def run_after_run(self, job: Job, outcome: Outcome, exc: BaseException | None) -> None:
        self.run_after(self.after_run if exc is None else self.after_raised, job, outcome, exc)

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
