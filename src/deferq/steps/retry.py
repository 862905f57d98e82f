"""Retry a finished durable job from one of its steps (`app.retry_from`, `deferq steps
retry-from`, POST /v1/jobs/{id}/retry-from, the console's job page; docs/steps.md).

The checkpoints the job recorded from that step on are dropped, the earlier ones kept,
and the job is queued again (`Backend.rerun`): its next run returns the kept results of
the earlier steps and runs the named step and every later one anew. Order matters when
a call dies halfway: the checkpoints are dropped first, so the job is never queued with
the ones it should redo; a call that dies before the job is queued leaves it finished,
to retry from an earlier step or with `deferq dead retry`.
"""

from __future__ import annotations

from typing import Any

from ..backends.base import Backend
from ..errors import DeferqError
from ..job import Job, JobState, dumps, loads
from .checkpoints import KINDS, STEPS, checked_name
from .patches import PATCH
from .undo import COMPENSATING, UNDONE

RETRYABLE = (JobState.DEAD, JobState.CANCELLED, JobState.SUCCEEDED)


class RetryRefused(DeferqError, ValueError):
    """`retry_from` refused: `reason` is "unknown job", "unknown step" or "unfinished"
    (the job still runs or waits); nothing was changed."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def owner(name: str) -> str:
    """The checkpoint a record belongs to: a wait's answer, a step's failures or undo,
    a patch marker are `<checkpoint>\\t<what>`."""
    return name.partition("\t")[0]


def retry_from(store: Backend, job_id: str, step: str) -> Job:
    """Drop the checkpoints of `job_id` from `step` on and queue the job again; the job
    as queued is returned. RetryRefused, nothing changed, for an unknown job or step,
    or a job not dead, cancelled or succeeded."""
    checked_name(step)
    job = store.get(job_id)
    if job is None:
        raise RetryRefused(f"there is no job {job_id!r:.60}", "unknown job")
    if job.state not in RETRYABLE:
        raise RetryRefused(f"job {job_id} is {job.state}: only a dead, cancelled or succeeded job can be "
                           "retried from a step", "unfinished")
    records = {name: loads(raw) for name, raw in store.kv_list(STEPS + job_id).items()}
    found = records.get(step)
    if found is None or found.get("kind") not in KINDS:
        known = sorted((r["index"], n) for n, r in records.items() if r.get("kind") in KINDS)
        names = ", ".join(repr(n) for _, n in known) or "none"
        raise RetryRefused(f"job {job_id} has no step named {step!r}; its steps, sleeps and waits: {names}",
                           "unknown step")
    dropped = [name for name, record in records.items() if dropped_from(records, name, record, found["index"])]
    kept = [(STEPS + job_id, name, dumps(record)) for name, record in records.items() if name not in dropped]
    store.kv_delete_many(STEPS + job_id, dropped)
    if job.state != JobState.DEAD and kept:  # an ended job's checkpoints expire: these stay
        store.kv_put_many(kept)
    if not store.rerun(job_id):
        now = store.get(job_id)
        state = "gone" if now is None else str(now.state)
        raise RetryRefused(f"job {job_id} could not be queued again (it is {state}, or a newer job holds its "
                           "unique key); "
                           f"its checkpoints from step {step!r} on were dropped", "unfinished")
    queued = store.get(job_id)
    assert queued is not None
    return queued


def dropped_from(records: dict[str, dict[str, Any]], name: str, record: dict[str, Any], index: int) -> bool:
    """Whether the record `name` belongs to a checkpoint at `index` or later."""
    if name == COMPENSATING or name.endswith(UNDONE):  # its compensation: a retried job has none yet
        return True
    first = record if name.endswith(PATCH) else records.get(owner(name), record)
    return "index" in first and int(first["index"]) >= index
