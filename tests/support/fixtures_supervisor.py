"""Tasks for the supervisor's child processes (`app = "tests.support.fixtures_supervisor:app"`).

Every run appends "<task> <job id> <attempt>" to the file named by DEFERQ_TEST_RECORD,
so a test can count how often each job ran, even across killed processes.
"""

from __future__ import annotations

import os
import signal
import time

import deferq
from deferq.attempt.runner import current_job

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


_ballast: list[bytes] = []


@app.task(timeout=60)
def hog(megabytes: int) -> None:
    """Hold on to memory (touched, so it is resident) to cross max_child_memory."""
    _ballast.append(b"x" * (megabytes * 1024 * 1024))
    _record("hog")


@app.task(max_attempts=1)
def crash() -> None:
    """Kill the worker process running it, as a segfaulting C extension would."""
    _record("crash")
    os.kill(os.getpid(), signal.SIGKILL)


@app.task(chunk=deferq.Chunk(size=50, wait=0.1), queue="chunks")
def chunked(items: list[int]) -> None:
    """A chunk task: records "chunked <item> <call size>" per item (a call has no one job)."""
    path = os.environ.get("DEFERQ_TEST_RECORD")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, "".join(f"chunked {item} {len(items)}\n" for item in items).encode())
        finally:
            os.close(fd)
