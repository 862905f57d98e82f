"""Throughput of a 10,000-member chord and batch: `python -m bench.workflows URL [N]`.

Stores the workflow in one call, runs it with one in-process worker (8 threads), and
prints how long the enqueue took and how long until the callback had run, in jobs per
second. The members do nothing: this measures the store's side of a workflow (edges
written, released one by one as members settle, the callback's inputs read back).

`python -m bench.workflows URL N --settle` times single settles instead: a batch of N
members with an on_complete callback, its members leased and settled one per call by
one thread (the settle and the release of the member's edge), as the median and 99th
percentile milliseconds of the first and the last 1,000 settles.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time

import deferq
from deferq.backends.base import Outcome
from deferq.options import JobOptions
from deferq.worker import Worker, WorkerConfig


def run(url: str, members: int) -> list[str]:
    app = deferq.App(url)

    @app.task
    def member(i: int) -> int:
        return i

    @app.task
    def total(values: list[int]) -> int:
        return sum(values)

    @app.task
    def report(batch: dict) -> int:  # type: ignore[type-arg]
        return int(batch["succeeded"])

    worker = Worker(app, WorkerConfig(queues=("default",), concurrency=8, idle_wait=0.05))
    thread = threading.Thread(target=worker.run, daemon=True)
    lines = []
    try:
        thread.start()
        started = time.perf_counter()  # the baseline: as many plain jobs, no links
        plain = app.enqueue_many([member.call(i) for i in range(members)])
        stored = time.perf_counter()
        app.wait(plain[-1].id, timeout=600)
        for job in plain:
            app.wait(job.id, timeout=600)
        lines.append(_line("plain", url, members, started, stored, time.perf_counter()))

        started = time.perf_counter()
        handle = deferq.chord([member.call(i) for i in range(members)], total.call()).enqueue()
        stored = time.perf_counter()
        assert handle.wait(timeout=600) == members * (members - 1) // 2
        done = time.perf_counter()
        lines.append(_line("chord", url, members, started, stored, done))

        started = time.perf_counter()
        with app.batch(on_complete=report.call()) as b:
            app.enqueue_many([member.call(i) for i in range(members)])
        stored = time.perf_counter()
        callback = app.get_batch(b.id).callbacks["on_complete"]  # type: ignore[union-attr]
        assert app.wait(callback, timeout=600) == members
        done = time.perf_counter()
        lines.append(_line("batch", url, members, started, stored, done))
    finally:
        worker.stop()
        thread.join(timeout=30)
        app.close()
    return lines


def _line(kind: str, url: str, members: int, started: float, stored: float, done: float) -> str:
    store = url.split(":", 1)[0]
    return (f"{store:<10} {kind}: {members} members stored in {stored - started:.2f}s, all done after "
            f"{done - started:.2f}s = {members / (done - started):,.0f} members/s")


def settle_times(url: str, members: int) -> list[str]:
    app = deferq.App(url)
    backend = app.backend
    try:
        started = time.perf_counter()
        with app.batch(on_complete=deferq.Call("report", (), {}, JobOptions(queue="callbacks"))) as b:
            for first in range(0, members, 10_000):  # in slices: one transaction each
                numbers = range(first, min(members, first + 10_000))
                app.enqueue_many([deferq.Call("member", (i,), {}) for i in numbers])
        stored = time.perf_counter() - started
        times = []
        while leased := backend.reserve(["default"], 500, "bench", 600, (0, 1, 2)):
            for job in leased:
                began = time.perf_counter()
                backend.settle([Outcome(job, "succeeded")])
                times.append(time.perf_counter() - began)
        callback = app.get(app.get_batch(b.id).callbacks["on_complete"])  # type: ignore[union-attr]
        assert callback is not None and callback.state == "queued", callback
    finally:
        app.close()
    store = url.split(":", 1)[0]
    return [f"{store:<10} settle, batch of {members:,} (stored in {stored:.1f}s): {label} "
            f"median {statistics.median(part) * 1000:.2f} ms, p99 {_p99(part) * 1000:.2f} ms"
            for label, part in (("first 1,000", times[:1000]), ("last 1,000", times[-1000:]))]


def _p99(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.99)]


if __name__ == "__main__":
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    for line in (settle_times if "--settle" in sys.argv else run)(sys.argv[1], count):
        print(line)
