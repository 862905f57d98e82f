"""A job as a table row: the one decoder every SQL store (SQLite, PostgreSQL, MySQL)
reads its rows with, and the view of a job just written.

Each dialect's `queries.sql` lists the columns in its `job_columns` fragment, in the
order `job_from_row` unpacks them; job reads add the store's clock after them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...job import Job, JobState, loads
from ..base import state_for_waiting


def job_from_row(row: Sequence[Any], now: float) -> Job:
    """A row of `job_columns`, read at store time `now`. An unreadable payload becomes the
    runner's `_unreadable_payload` marker: the worker marks that job dead with the reason."""
    (job_id, task, payload, queue, priority, state, attempts, max_attempts, timeout, key,
     run_at, created_at, lease_until, worker, error, result, finished_at) = row  # fmt: skip
    try:
        args, kwargs = loads(payload)
    except (ValueError, TypeError):
        args, kwargs = (), {"_unreadable_payload": str(payload)[:200]}
    return Job(
        id=job_id, task=task, args=tuple(args), kwargs=kwargs, queue=queue,
        priority=priority,
        state=state_for_waiting(run_at, now) if state == "queued" else JobState(state),
        attempts=attempts, max_attempts=max_attempts, timeout=timeout, key=key,
        run_at=run_at, created_at=created_at, lease_until=lease_until, worker=worker,
        error=error, result=None if result is None else loads(result),
        finished_at=finished_at,
    )  # fmt: skip


def stored_view(job: Job, run_at: float, now: float) -> Job:
    """A job as just stored (due at `run_at`, created `now`), scheduled or queued."""
    return job.evolve(state=state_for_waiting(run_at, now), run_at=run_at, created_at=now)
