"""A job as a table row: the one decoder every SQL store (SQLite, PostgreSQL, MySQL)
reads its rows with, and the view of a job just written.

Each dialect's `queries.sql` lists the columns in its `job_columns` fragment, in the
order `job_from_row` unpacks them; job reads add the store's clock after them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...job import Job, JobState, decode_payload, loads
from ..base import LEVELS, Enqueue, state_for_waiting

WIDTH = 24  # columns of `job_columns`; a job read puts the store's clock right after them


def job_of(row: Sequence[Any]) -> Job:
    """A job read: `job_columns`, then the store's clock (then anything else)."""
    return job_from_row(row[:WIDTH], row[WIDTH])


def job_from_row(row: Sequence[Any], now: float) -> Job:
    """A row of `job_columns`, read at store time `now`. An unreadable payload becomes the
    runner's `_unreadable_payload` marker: the worker marks that job dead with the reason."""
    (job_id, task, payload, queue, priority, state, attempts, max_attempts, timeout, key,
     run_at, created_at, lease_until, worker, error, result, finished_at,
     progress, progress_message, cancel_requested_at, expires_at,
     updated_at, remark, last_worker) = row
    try:
        args, kwargs, meta = decode_payload(payload)
    except (ValueError, TypeError):
        args, kwargs, meta = (), {"_unreadable_payload": str(payload)[:200]}, {}
    return Job(
        id=job_id, task=task, args=args, kwargs=kwargs, queue=queue,
        priority=priority % LEVELS,  # a job held back is stored raised (base.BEHIND)
        state=state_for_waiting(run_at, now) if state == "queued" else JobState(state),
        attempts=attempts, max_attempts=max_attempts, timeout=timeout, key=key,
        run_at=run_at, created_at=created_at, lease_until=lease_until, worker=worker,
        error=error, result=None if result is None else loads(result),
        finished_at=finished_at, meta=meta, progress=progress, progress_message=progress_message,
        cancel_requested=cancel_requested_at is not None, expires_at=expires_at,
        updated_at=updated_at, remark=remark, last_worker=last_worker,
    )


def stored_view(item: Enqueue, run_at: float, now: float) -> Job:
    """A job as just stored (due at `run_at`, created `now`), scheduled or queued."""
    return item.job.evolve(state=state_for_waiting(run_at, now), run_at=run_at, created_at=now,
                           expires_at=item.expiry(now))
