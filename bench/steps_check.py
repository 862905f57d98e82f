"""`deferq steps check` on one store: `python -m bench.steps_check URL [N]` (10,000 by
default). N durable jobs sleep for a day, each with a step and the sleep kept (written
as a run writes them), beside N plain delayed jobs; then `app.steps_check()` replays
them against code that fits, and against code with the step renamed (every job named).
Prints the seconds of each check; run it on an empty store (it leaves its jobs)."""

from __future__ import annotations

import sys
import time

import deferq
from deferq.job import dumps
from deferq.steps.checkpoints import STEPS

BATCH = 1000
RENAMED = [False]


def charge(order: int) -> int:
    return order


def build(url: str) -> deferq.App:
    app = deferq.App(url)

    @app.task(name="bench-order")
    def order(n: int) -> int:
        job = deferq.current_job()
        assert job is not None
        job.step("charge v2" if RENAMED[0] else "charge", charge, n)
        job.sleep("a day", 86400)
        return n

    @app.task(name="bench-plain")
    def plain(n: int) -> int:
        return n

    return app


def seed(app: deferq.App, count: int) -> None:
    """`count` sleeping durable jobs and as many plain delayed ones, in batches."""
    now, name = app.backend.now(), f"{charge.__module__}.{charge.__qualname__}"
    for first in range(0, count, BATCH):
        size = min(BATCH, count - first)
        durable, plain = (app.tasks[name].options(delay=86400) for name in ("bench-order", "bench-plain"))
        jobs = app.enqueue_many([durable.call(first + n) for n in range(size)])
        app.enqueue_many([plain.call(first + n) for n in range(size)])
        records = []
        for job in jobs:
            records.append((STEPS + job.id, "charge", dumps({"kind": "step", "index": 0, "at": now, "attempt": 1,
                                                            "fn": name, "result": 1, "took": 0.001})))
            records.append((STEPS + job.id, "a day", dumps({"kind": "sleep", "index": 1, "at": now, "attempt": 1,
                                                           "until": now + 86400})))
        app.backend.kv_put_many(records)


def measure(url: str, count: int) -> tuple[float, float]:
    """Seconds of a check for code that fits every job, then for a rename naming each."""
    app = build(url)
    try:
        app.backend.migrate()
        started = time.perf_counter()
        seed(app, count)
        print(f"{url.split(':')[0]}: {count} sleeping durable jobs and {count} plain ones stored in "
              f"{time.perf_counter() - started:.1f}s")
        RENAMED[0] = False
        fits = app.steps_check()
        assert fits.checked == count and not fits.findings, fits.findings[:3]
        RENAMED[0] = True
        renamed = app.steps_check()
        assert len(renamed.failing) == count
        return fits.seconds, renamed.seconds
    finally:
        RENAMED[0] = False
        app.close()


def main(url: str, count: int) -> None:
    fits, renamed = measure(url, count)
    print(f"  steps check, code that fits: {fits:.2f}s; step renamed ({count} jobs named): {renamed:.2f}s")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10_000)
