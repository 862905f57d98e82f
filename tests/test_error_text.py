"""The error a failed job keeps: the traceback a user reads in the console and `deferq
show`, chained causes included, its end kept when it is long, no caret lines."""

from __future__ import annotations

import deferq
from deferq.worker import Worker, WorkerConfig


def lookup(table: dict[str, int], name: str) -> int:
    return table[name]


def test_a_failed_job_keeps_its_traceback_with_the_cause_and_without_carets():
    app = deferq.App("memory://")

    @app.task(max_attempts=1)
    def price(name: str) -> int:
        try:
            return lookup({}, name)
        except KeyError as missing:
            raise ValueError(f"no price for {name}") from missing

    job = price.enqueue("tea")
    assert Worker(app, WorkerConfig(burst=True, concurrency=1)).run() == 0
    error = app.get(job.id).error
    assert error is not None
    assert "KeyError: 'tea'" in error and "direct cause" in error
    assert error.rstrip().endswith("ValueError: no price for tea")
    assert "return table[name]" in error and 'line 11, in lookup' in error  # the frame and its source
    assert not any(set(line.strip()) <= {"^", "~"} for line in error.splitlines() if line.strip())
    app.close()


def test_a_deep_traceback_keeps_its_end():
    app = deferq.App("memory://")

    def down(depth: int) -> None:
        if depth == 0:
            raise RuntimeError("at the bottom")
        down(depth - 1)

    @app.task(max_attempts=1)
    def deep() -> None:
        down(200)

    job = deep.enqueue()
    assert Worker(app, WorkerConfig(burst=True, concurrency=1)).run() == 0
    error = app.get(job.id).error
    assert error is not None and len(error) <= 4000
    assert error.rstrip().endswith("RuntimeError: at the bottom")
    app.close()
