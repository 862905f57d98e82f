"""Tasks for the supervisor's child processes (`app = "tests.fixtures_supervisor:app"`).

Every run appends "<task> <job id> <attempt>" to the file named by DEFERQ_TEST_RECORD,
so a test can count how often each job ran, even across killed processes.
"""

from __future__ import annotations

import os
import time

import deferq
from deferq.worker.runner import current_job

app = deferq.App(os.environ.get("DEFERQ_URL", "memory://"), lease=2)


def _record(task: str) -> None:
    path = os.environ.get("DEFERQ_TEST_RECORD")
    job = current_job()
    if path and job is not None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{task} {job.id} {job.attempts}\n".encode())  # atomic with O_APPEND
        finally:
            os.close(fd)


@app.task(timeout=60)
def nap(seconds: float) -> float:
    time.sleep(seconds)
    _record("nap")
    return seconds


@app.task(timeout=1, max_attempts=2, backoff=deferq.backoff.fixed(0))
def hang() -> None:
    _record("hang-start")
    time.sleep(3600)


@app.task(queue="ticks")
def tick() -> None:
    _record("tick")
