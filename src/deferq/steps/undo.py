"""Compensation: undo handlers of a durable job's finished steps, run in reverse order
when the job ends dead or is cancelled (`job.step_with_undo`; docs/steps.md,
"Compensation").

A step with an undo handler keeps the handler's name in its checkpoint (`undo`). Each
run registers the handlers of the steps it reaches, replayed or new (`JobSteps.undos`).
When a run would end the job dead or cancelled and a recorded step has an undo:
1. the job's records get a marker, `\\tcompensating` (how it ends: dead or cancelled,
   and its error), and the job is listed in `deferq.compensating`;
2. each step's handler is called with the step's kept result, the last step first;
   each outcome is kept as `<step>\\tundone` (done, failed with its error, or not run:
   a step this run did not reach), so a handler whose outcome is kept never runs again;
3. the job leaves the list and settles as it was to end.
Each handler's call is preceded by a lease check, like a step's function.

A run that finds the marker (it resumes after a crash mid-compensation) runs no new
step: the first point it has not recorded raises `Compensating`, and whatever the run
ends with, it compensates what is left and ends as the marker says. A worker killed
mid-compensation leaves its job active, then dead or cancelled when its lease expires:
every worker looks at `deferq.compensating` every SWEEP_EVERY seconds and queues such
a job again (`resume_compensations`), to finish. A job cancelled while it waits (not
running) is queued again the same way by `after_cancel`, to run its handlers.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..attempt.pauses import pause_at
from ..attempt.runner import describe
from ..backends.base import STEPS, Backend, Outcome, OutcomeKind
from ..backends.guard import STORE_FAILURES
from ..errors import ConfigError, DeferqError
from ..job import Job, JobState, dumps, loads
from .names import function_name

log = logging.getLogger("deferq.worker")

UNDONE = "\tundone"  # + a step's name: the outcome of its undo handler
COMPENSATING = "\tcompensating"  # the job compensates: how it ends once done
PENDING = "deferq.compensating"  # job id -> 1: jobs whose compensation is under way
UNDO_ON = frozenset({OutcomeKind.DEAD, OutcomeKind.CANCELLED})
SWEEP_EVERY = 5.0  # seconds between a worker's looks at the jobs left mid-compensation


class Compensating(DeferqError):
    """The job compensates: it runs no new step (a run resumed mid-compensation)."""


class Steps(Protocol):
    """What compensation uses of a run's checkpoints (checkpoints.JobSteps)."""

    store: Backend
    job: Job
    undos: dict[str, Callable[[Any], Any]]

    def load(self) -> dict[str, dict[str, Any]]: ...

    def now(self) -> float: ...

    def fence(self, before: str | None = None) -> None: ...

    def put(self, name: str, record: dict[str, Any], encoded: bytes | None = None) -> dict[str, Any]: ...


def checked_undo(undo: object) -> Callable[[Any], Any]:
    if not callable(undo) or inspect.iscoroutinefunction(undo):
        raise ConfigError(f"an undo handler must be a plain function of the step's result, got {undo!r:.60}")
    return undo


def with_undo(record: dict[str, Any], undo: Callable[[Any], Any]) -> dict[str, Any]:
    """A step's checkpoint, naming its undo handler."""
    return {**record, "undo": function_name(undo)}


def undoable(records: dict[str, dict[str, Any]]) -> list[str]:
    """The steps recorded with an undo handler, the last one first."""
    found = sorted(((r["index"], n) for n, r in records.items() if r.get("kind") == "step" and r.get("undo")),
                   reverse=True)
    return [name for _, name in found]


def must_compensate(records: dict[str, dict[str, Any]] | None, outcome: Outcome) -> bool:
    """Whether this run's end starts (or goes on with) its job's compensation."""
    if not records:
        return False
    return COMPENSATING in records or (outcome.kind in UNDO_ON and bool(undoable(records)))


def compensate(steps: Steps, outcome: Outcome) -> Outcome:
    """Run what is left of the job's undo handlers (see the module's doc); the outcome
    the job ends with. A lost lease or a store error stops here: the job settles as it
    was to end (or its outcome is refused), still listed, and is queued again to finish."""
    job = steps.job
    try:
        records = steps.load()
        marker = records.get(COMPENSATING)
        if marker is None:
            ends = outcome.kind if outcome.kind in UNDO_ON else OutcomeKind.DEAD
            steps.store.kv_put(PENDING, job.id, b"1")
            marker = steps.put(COMPENSATING, {"ends": ends.value, "error": outcome.error, "at": steps.now(),
                                              "attempt": job.attempts})
        for name in undoable(records):
            if name + UNDONE not in records:
                undo_one(steps, name, records[name])
        steps.store.kv_delete(PENDING, job.id)
    except DeferqError as exc:
        log.warning("job %s (%s): its compensation stopped (%s); it goes on when the job is queued again",
                    job.id, job.task, exc)
        marker = steps.load().get(COMPENSATING) or {"ends": OutcomeKind.DEAD.value, "error": outcome.error}
    return Outcome(job, OutcomeKind(marker["ends"]), error=marker.get("error"))


def undo_one(steps: Steps, name: str, record: dict[str, Any]) -> None:
    """Call one step's undo handler with its result and keep the outcome (fenced)."""
    handler = steps.undos.get(name)
    steps.fence()
    started = steps.now()
    if handler is None:
        done: dict[str, Any] = {"state": "not run", "error": "this run did not reach the step, so its undo "
                                                              f"handler ({record['undo']}) was not known"}
    else:
        try:
            returned = handler(record.get("result"))
            done = {"state": "done"}
            if inspect.isawaitable(returned):
                done = {"state": "failed", "error": "the undo handler returned an awaitable: it must be a plain "
                                                    "function"}
        except Exception as exc:  # noqa: BLE001 - a handler's failure is its outcome, kept
            done = {"state": "failed", "error": describe(exc)[-2000:]}
            log.warning("job %s (%s): the undo handler of step %r failed: %s", steps.job.id, steps.job.task,
                        name, f"{type(exc).__name__}: {exc}")
    done.update(at=started, took=round(steps.now() - started, 6), attempt=steps.job.attempts,
                index=record["index"])
    steps.put(name + UNDONE, done)
    steps.load()[name + UNDONE] = done
    pause_at("undo.after")


def after_cancel(store: Backend, job_id: str) -> bool:
    """A job just cancelled while it was not running: if it has undo handlers not run
    yet, mark it to compensate and queue it again (a worker runs them, and it ends
    cancelled). Whether it was queued. (A running job asked to stop compensates on its
    worker, when its run ends.)"""
    job = store.get(job_id)
    if job is None or job.state != JobState.CANCELLED:
        return False
    records = {name: loads(raw) for name, raw in store.kv_list(STEPS + job_id).items()}
    if not [name for name in undoable(records) if name + UNDONE not in records]:
        return False
    marker = {"ends": OutcomeKind.CANCELLED.value, "error": "cancelled", "at": store.now(), "attempt": None}
    store.kv_put(STEPS + job_id, COMPENSATING, dumps(marker), only_new=True)
    store.kv_put(PENDING, job_id, b"1")
    return store.rerun(job_id)


def resume_compensations(store: Backend) -> int:
    """Queue again the jobs left dead or cancelled mid-compensation (a worker killed
    while it ran their handlers); forget those gone. How many were queued."""
    queued = 0
    for job_id in store.kv_list(PENDING):
        job = store.get(job_id)
        if job is None:
            store.kv_delete(PENDING, job_id)
        elif job.state in (JobState.DEAD, JobState.CANCELLED) and store.rerun(job_id):
            queued += 1
    return queued


class Sweep:
    """`resume_compensations` at most every SWEEP_EVERY seconds (a worker's tick)."""

    def __init__(self) -> None:
        self.due = 0.0

    def tick(self, store: Backend) -> None:
        now = time.monotonic()
        if now < self.due:
            return
        self.due = now + SWEEP_EVERY
        try:
            resumed = resume_compensations(store)
        except STORE_FAILURES as exc:  # the worker says the store is down; this looks again later
            log.debug("the jobs left mid-compensation could not be read: %s", exc)
            return
        if resumed:
            log.info("queued %d job(s) again to finish their compensation", resumed)


def timeline_fields(record: dict[str, Any], undone: dict[str, Any] | None) -> dict[str, Any]:
    """A step's row of the timeline: its undo handler, and how the handler's run went."""
    if not record.get("undo"):
        return {}
    return {"undo": record["undo"], "undone": None if undone is None else
            {key: undone.get(key) for key in ("state", "at", "took", "error")}}
