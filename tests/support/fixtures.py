"""Tasks for worker processes started by tests: `deferq worker --app tests.support.fixtures:app`.

Each run appends a line to the file named by DEFERQ_TEST_RECORD, so a test can count
exactly how often every job ran, even across killed processes.
"""

from __future__ import annotations

import asyncio
import os
import time

import deferq

app = deferq.App(os.environ.get("DEFERQ_URL", "memory://"), lease=2)


def _record(line: str) -> None:
    path = os.environ.get("DEFERQ_TEST_RECORD")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{line}\n".encode())  # one write: atomic with O_APPEND
        finally:
            os.close(fd)


@app.task()
def noop(i: int = 0) -> int:
    return i


@app.task(max_attempts=5)
def record(i: int, seconds: float = 0.0) -> int:
    _record(f"start {i}")
    if seconds:
        time.sleep(seconds)
    _record(f"done {i}")
    return i


@app.task(timeout=0.5, max_attempts=2, backoff=deferq.backoff.fixed(0.1))
def hang(i: int) -> None:
    _record(f"hang {i}")
    time.sleep(60)


@app.task()
async def async_record(i: int) -> int:
    await asyncio.sleep(0)
    _record(f"done {i}")
    return i


@app.task()
def chord_done(values: list[int]) -> int:
    """A chord's callback (tests/process/test_workflow_crash.py): how many results, their sum."""
    _record(f"chord {len(values)} {sum(v or 0 for v in values)}")
    return len(values)


@app.task()
def batch_done(batch: dict) -> None:  # type: ignore[type-arg]
    _record(f"batch {batch['total']} {batch['succeeded']} {batch['dead']}")


@app.task(max_attempts=20)
def stepped(i: int) -> int:
    """Durable steps under crashes (tests/process/test_steps_crash.py): each step records itself
    once it ran; plain work between steps (re-run on every resume) gives kills a target."""
    job = deferq.current_job()
    assert job is not None
    job.step("one", _record, f"one {i}")
    time.sleep(0.01)
    job.sleep("nap", 0.2)
    job.step("two", _record, f"two {i}")
    time.sleep(0.01)
    paid = job.wait_for("answer", event="answer", key=str(i), timeout=60)
    job.step("three", _record, f"three {i} {paid}")
    return i


@app.task(max_attempts=20)
def child_square(i: int) -> int:
    """A child job of `fan_out` (tests/process/test_children_crash.py): records that it ran."""
    _record(f"child {i}")
    time.sleep(0.005)
    return i * i


@app.task(max_attempts=20)
def fan_out(first: int, count: int) -> list[int]:
    """Gathers `count` children under SIGKILLs; records each of its runs."""
    job = deferq.current_job()
    assert job is not None
    _record(f"parent {first}")
    return job.gather("fan-out", [child_square.call(i) for i in range(first, first + count)])


@app.task(chunk=deferq.Chunk(size=50, wait=0.2), queue="chunks", timeout=120)
def record_chunk(items: list[int]) -> None:
    """Records "call <pid> <items>"; with DEFERQ_TEST_HOLD ("<item> <path>"), the call
    holding that item records "held <pid>" and waits (at most 60 s) until the path exists."""
    _record(f"call {os.getpid()} " + ",".join(map(str, items)))
    hold = os.environ.get("DEFERQ_TEST_HOLD")
    if hold:
        item, marker = hold.split(" ", 1)
        if int(item) in items and not os.path.exists(marker):
            _record(f"held {os.getpid()}")
            deadline = time.monotonic() + 60
            while not os.path.exists(marker) and time.monotonic() < deadline:
                time.sleep(0.02)
