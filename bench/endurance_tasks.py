"""The tasks the endurance run's workers run (`--app bench.endurance_tasks:app`).

The store comes from DEFERQ_URL. Every task, as its last step, appends its job's id to
the record file DEFERQ_ENDURANCE_RECORD (one O_APPEND write: whole lines, across
processes), so the harness counts how often each job ran to its end.
"""

from __future__ import annotations

import os
import time

import deferq

PAUSABLE = "pausable"  # the queue the harness pauses and resumes


def record() -> None:
    job = deferq.current_job()
    assert job is not None
    fd = os.open(os.environ["DEFERQ_ENDURANCE_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{job.id}\n".encode())
    finally:
        os.close(fd)


def make_app(url: str) -> deferq.App:
    """An App with the tasks: the workers' and the harness's (which enqueues with the
    tasks' queues and limits)."""
    app = deferq.App(url, lease=10)
    for task, options in ((long, {"timeout": 120}), (short, {}), (rated, {"rate": "4/s"}),
                          (slotted, {"concurrency": 2}), (pausable, {"queue": PAUSABLE})):
        app.task(task, **options)
    return app


def long(seconds: int) -> int:
    """A long job that reports its progress once a second."""
    job = deferq.current_job()
    assert job is not None
    for second in range(seconds):
        job.progress(second / seconds, f"{second} of {seconds} s")
        time.sleep(1)
    job.progress(1.0, "done")
    record()
    return seconds


def short(n: int) -> int:
    record()
    return n * 2


def rated(n: int) -> int:
    record()
    return n


def slotted(n: int) -> int:
    time.sleep(0.3)
    record()
    return n


def pausable(n: int) -> int:
    record()
    return n


app = make_app(os.environ.get("DEFERQ_URL", "memory://"))
