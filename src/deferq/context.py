"""The job whose task runs in this context: `deferq.current_job()`.

A context variable, so each runner thread and each asyncio task sees its own job.
"""

from __future__ import annotations

from contextvars import ContextVar

from .job import Job

running_job: ContextVar[Job | None] = ContextVar("deferq_current_job", default=None)


def current_job() -> Job | None:
    """The job whose task is running in this context (None outside a task): lets a task
    read its attempt number, id or timeout."""
    return running_job.get()
