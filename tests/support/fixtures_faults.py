"""Tasks for the fault tests' worker processes (`--app tests.support.fixtures_faults:app`).

The store comes from DEFERQ_URL, the lease from DEFERQ_TEST_LEASE (2 s). Each run
appends "<pid> <job id> <attempt>" to the file DEFERQ_TEST_RECORD names, so a test can
tell which process ran which attempt, even across stopped and killed processes.
"""

from __future__ import annotations

import os
import time

import deferq
from deferq.attempt.runner import current_job

app = deferq.App(os.environ.get("DEFERQ_URL", "memory://"), lease=float(os.environ.get("DEFERQ_TEST_LEASE", "2")))


def runs(path: str | os.PathLike[str]) -> list[tuple[int, str, int]]:
    """(pid, job id, attempt) of every run recorded so far."""
    try:
        with open(path) as record:
            return [(int(pid), job_id, int(n)) for pid, job_id, n in map(str.split, record)]
    except FileNotFoundError:
        return []


@app.task(timeout=60)
def stamp(seconds: float) -> int:
    """Record the run, sleep, and return the pid of the process that ran it: the
    stored result says whose outcome the store kept."""
    job = current_job()
    assert job is not None
    fd = os.open(os.environ["DEFERQ_TEST_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{os.getpid()} {job.id} {job.attempts}\n".encode())  # atomic with O_APPEND
    finally:
        os.close(fd)
    time.sleep(seconds)  # monotonic: after a SIGSTOP longer than this, it returns at once
    return os.getpid()


@app.task(concurrency=1, concurrency_key="customer:{customer}", max_attempts=50)
def one_at_a_time(customer: str, seconds: float) -> None:
    """Concurrency 1 per customer: records "start|end <pid> <job id> <time>"."""
    job = current_job()
    assert job is not None

    def note(what: str) -> None:
        fd = os.open(os.environ["DEFERQ_TEST_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{what} {os.getpid()} {job.id} {time.time():.6f}\n".encode())
        finally:
            os.close(fd)

    note("start")
    time.sleep(seconds)
    note("end")


@app.task(concurrency=1, concurrency_key="account:{account}", timeout=60)
def fenced(account: str, seconds: float) -> int | None:
    """Concurrency 1 per account: records "fence <pid> <job id> <attempt> <fence>" when it
    starts and "holds <pid> <job id> <attempt> <0|1>" (holds_slot()) when it ends."""
    job = current_job()
    assert job is not None

    def note(what: str, value: object) -> None:
        fd = os.open(os.environ["DEFERQ_TEST_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{what} {os.getpid()} {job.id} {job.attempts} {value}\n".encode())
        finally:
            os.close(fd)

    note("fence", job.slot_fence)
    time.sleep(seconds)
    note("holds", int(job.holds_slot()))
    return job.slot_fence
