"""Child jobs on one store: `python -m bench.children URL [N] [PARENTS]`.

1. One parent gathers N children (10,000 unless told), run by one in-process worker
   (4 threads): the time its gather took to keep their ids and store them, beside
   `enqueue_many` of N plain jobs; how late the parent resumed after its last child
   ended (from the end of that child's function to the gather's return); how many
   times the parent ran; and this process's CPU per child, from the fan-out to the
   parent's end (the worker's, and SQLite's, which runs in it), beside N plain jobs.
2. PARENTS parents (100 unless told) each gather N / PARENTS children, one parent after
   another: the same lateness, p50 / p99 (the wake-up alone); then all at once, their
   children side by side on one queue (a woken parent waits behind the children stored
   before its wake, as any job due later than they are).
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from typing import Any

import deferq
from bench import machine
from deferq.steps.checkpoints import Suspend
from deferq.worker import Worker, WorkerConfig

CONCURRENCY = 4


class Record:
    """What the tasks report from their runs (this process): each child's end, each
    parent's runs, how long its gather took to store its children, when it resumed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ended: dict[int, float] = {}  # child -> when its function returned
        self.runs: dict[int, int] = {}
        self.stored: dict[int, float] = {}  # parent -> seconds its first gather took (up to leaving)
        self.resumed: dict[int, float] = {}
        self.done = threading.Event()
        self.parents = 0
        self.plain = 0

    def add_plain(self, count: int) -> None:
        with self.lock:
            self.plain += 1
            if self.plain >= count:
                self.done.set()


RECORD = [Record()]


def tasks(app: deferq.App) -> tuple[Any, Any, Any]:
    @app.task(name="bench.child", max_attempts=3)
    def child(parent: int, i: int) -> int:
        RECORD[0].ended[parent * 1_000_000 + i] = time.time()
        return i

    @app.task(name="bench.parent", max_attempts=3)
    def parent(number: int, first: int, count: int) -> int:
        job = deferq.current_job()
        assert job is not None
        record = RECORD[0]
        with record.lock:
            record.runs[number] = record.runs.get(number, 0) + 1
        started = time.perf_counter()
        try:
            results = job.gather("fan-out", [child.call(number, i) for i in range(first, first + count)])
        except Suspend:
            record.stored.setdefault(number, time.perf_counter() - started)
            raise
        with record.lock:
            record.resumed[number] = time.time()
            if len(record.resumed) >= record.parents:
                record.done.set()
        return len(results)

    @app.task(name="bench.plain")
    def plain(i: int, count: int) -> None:
        RECORD[0].add_plain(count)

    return child, parent, plain


def fan_out(app: deferq.App, parent: Any, n: int, parents: int, in_turn: bool = False) -> tuple[Record, float]:
    """Run `parents` parents of n / parents children each to their ends (`in_turn`: each
    once the one before resumed); (what they reported, this process's CPU from the first
    enqueue until the last parent resumed)."""
    record = RECORD[0] = Record()
    each = n // parents
    cpu = time.process_time()
    for batch in ([[p] for p in range(parents)] if in_turn else [list(range(parents))]):
        record.done.clear()
        record.parents = batch[-1] + 1
        app.enqueue_many([parent.call(p, p * each, each) for p in batch])
        if not record.done.wait(600):
            raise SystemExit(f"the parents did not all resume in 10 minutes ({len(record.resumed)} of {parents})")
    return record, time.process_time() - cpu


def lateness(record: Record, each: int) -> list[float]:
    """Per parent: from the end of its last child's function to its gather's return."""
    late = []
    for number, resumed in record.resumed.items():
        last = max(record.ended[number * 1_000_000 + i] for i in range(number * each, (number + 1) * each))
        late.append(resumed - last)
    return late


def plain_jobs(app: deferq.App, plain: Any, n: int) -> tuple[float, float]:
    """(seconds to store N plain jobs in one enqueue_many, this process's CPU per job to run them)."""
    record = RECORD[0] = Record()
    calls = [plain.call(i, n) for i in range(n)]
    cpu = time.process_time()
    started = time.perf_counter()
    app.enqueue_many(calls)
    stored = time.perf_counter() - started
    if not record.done.wait(600):
        raise SystemExit("the plain jobs did not all run in 10 minutes")
    return stored, (time.process_time() - cpu) / n


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def main(url: str, n: int = 10_000, parents: int = 100) -> None:
    app = deferq.App(url, lease=30)
    _, parent, plain = tasks(app)
    worker = Worker(app, WorkerConfig(queues=("default",), concurrency=CONCURRENCY))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    print(f"{url.split(':')[0]}: {machine.describe()}; one in-process worker, {CONCURRENCY} threads")
    try:
        with machine.Load() as load:
            record, cpu = fan_out(app, parent, n, 1)
        [late] = lateness(record, n)
        print(f"  1 parent of {n:,} children: its gather stored them in {record.stored[0]:.2f} s, resumed "
              f"{late * 1e3:.0f} ms after the last child ended, ran {record.runs[0]} times; CPU per child "
              f"{cpu / n * 1e6:.0f} µs (load {load.value:.1f})")
        with machine.Load() as load:
            stored, per_job = plain_jobs(app, plain, n)
        print(f"  {n:,} plain jobs: enqueue_many stored them in {stored:.2f} s; CPU per job "
              f"{per_job * 1e6:.0f} µs (load {load.value:.1f})")
        for in_turn in (True, False):
            with machine.Load() as load:
                record, cpu = fan_out(app, parent, n, parents, in_turn)
            late_all = lateness(record, n // parents)
            runs = statistics.mean(record.runs.values())
            how = "one after another" if in_turn else "at once"
            print(f"  {parents} parents of {n // parents:,} children, {how}: "
                  f"resumed after their last child ended p50 {percentile(late_all, 50) * 1e3:.0f} ms / p99 "
                  f"{percentile(late_all, 99) * 1e3:.0f} ms; runs a parent {runs:.2f}; CPU per child "
                  f"{cpu / n * 1e6:.0f} µs (load {load.value:.1f})")
    finally:
        worker.stop()
        thread.join(timeout=30)
        app.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args:
        raise SystemExit(__doc__)
    main(args[0], *(int(a) for a in args[1:]))
