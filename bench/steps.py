"""Durable steps on one store: `python -m bench.steps URL [N] [PARTS]` (PARTS: any of
`steps,sleep,sleep-step,event`, comma-separated; `steps,sleep,event` by default).

1. The cost of a step: 200 new steps of one leased job (each one fenced write),
   then the same steps on the replay path (the job run again: its checkpoints read
   once, each finished step a look-up), and that read.
2. N jobs that sleep until one moment (2 s + 5 ms a job from now), with one in-process
   worker (8 threads): the worker's CPU while they sleep and how late each resumed
   (when its sleep returned, past that moment: p50 / p99), each ending there as a
   plain job ends when it starts; then, with the same worker, as many plain jobs due
   at one moment, how late each began. For both: this process's CPU per job from that
   moment until the last one got there (the worker's, and SQLite's, which runs in it).
   `sleep-step`: the same, the sleepers keeping one more step (one fenced write) after
   they resume, and how late that step was kept.
3. N jobs waiting for one (event, key): the time from `send_event` until every one has
   finished.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import deferq
from deferq.steps.checkpoints import JobSteps
from deferq.worker import Worker, WorkerConfig

SLEEP_BASE, SLEEP_PER_JOB = 2.0, 0.005  # seconds: long enough for every job to be asleep at once
STEPS = 200
PARTS = ("steps", "sleep", "event")


def step_costs(app: deferq.App) -> str:
    job = app.enqueue("bench-steps")
    [leased] = app.backend.reserve(["default"], 1, "bench", 60, (0, 1, 2))
    fresh = JobSteps(app.backend, 60, 3600, leased)
    started = time.perf_counter()
    for i in range(STEPS):
        fresh.step(f"s{i}", int, (i,), {})
    new = (time.perf_counter() - started) / STEPS
    again = JobSteps(app.backend, 60, 3600, leased)
    started = time.perf_counter()
    again.load()
    loaded = time.perf_counter()
    for i in range(STEPS):
        again.step(f"s{i}", int, (i,), {})
    replay = (time.perf_counter() - loaded) / STEPS
    app.cancel(job.id)
    return (f"new step {new * 1e3:.2f} ms; finished step on replay {replay * 1e6:.1f} µs "
            f"(after reading {STEPS} checkpoints once: {(loaded - started) * 1e3:.1f} ms)")


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


class Tally:
    """What the jobs of one phase report from inside their runs (same process), and
    when all have."""

    def __init__(self, count: int) -> None:
        self.count, self.rows = count, list[tuple[float, ...]]()
        self.lock, self.done = threading.Lock(), threading.Event()

    def add(self, *row: float) -> None:
        with self.lock:
            self.rows.append(row)
            if len(self.rows) >= self.count:
                self.done.set()


TALLY = [Tally(0)]  # the phase running now


def arrivals(tally: Tally, moment: float) -> float:
    """Wait for every job of `tally` past `moment`; this process's CPU per job meanwhile."""
    time.sleep(max(0.0, moment - time.time() - 0.05))
    cpu = time.process_time()
    if not tally.done.wait(600):
        raise TimeoutError(f"only {len(tally.rows)} of {tally.count} jobs reported")
    return (time.process_time() - cpu) / tally.count


def late(values: list[float]) -> str:
    p50, p99 = percentile(values, 50) * 1e3, percentile(values, 99) * 1e3
    return f"min {min(values) * 1e3:.0f} ms, p50 {p50:.0f} ms, p99 {p99:.0f} ms"


def sleepers_and_plain_jobs(app: deferq.App, sleeper: Any, plain: Any, count: int, then_step: bool) -> list[str]:
    """Sleepers that, once resumed, end (as a plain job does when it starts) or, with
    `then_step`, keep one more step first; then as many plain jobs."""
    lines = []
    TALLY[0] = tally = Tally(count)
    until = time.time() + SLEEP_BASE + SLEEP_PER_JOB * count
    app.enqueue_many([sleeper.call(until, then_step) for _ in range(count)])
    wait_until(lambda: scheduled(app) >= count, 600)
    cpu, wall = time.process_time(), time.monotonic()
    time.sleep(1.0)  # the sleepers sleep: what does the worker spend meanwhile?
    idle = (time.process_time() - cpu) / (time.monotonic() - wall)
    per_job = arrivals(tally, until)
    lines.append(f"{count} sleeping jobs: worker CPU while they sleep {idle * 100:.1f}% of a core; "
                 f"resumed late by {late([row[0] for row in tally.rows])}; CPU {per_job * 1e3:.2f} ms a job")
    if then_step:
        lines.append(f"{count} sleeping jobs: their next step kept late by {late([row[1] for row in tally.rows])}")
    TALLY[0] = tally = Tally(count)
    due = time.time() + SLEEP_BASE + SLEEP_PER_JOB * count
    app.enqueue_many([plain.options(delay=due - time.time()).call(due) for _ in range(count)])
    per_job = arrivals(tally, due)
    lines.append(f"{count} plain jobs due at one moment: began late by {late([row[0] for row in tally.rows])}; "
                 f"CPU {per_job * 1e3:.2f} ms a job")
    return lines


def run(url: str, count: int, parts: Sequence[str] = PARTS) -> list[str]:
    app = deferq.App(url)

    @app.task(name="bench-steps")
    def noop() -> None: ...

    @app.task(name="bench-sleeper")
    def sleeper(until: float, then_step: bool = False) -> None:
        job = deferq.current_job()
        assert job is not None
        job.sleep_until("nap", until)
        woke = time.time() - until
        if then_step:
            job.step("woke", time.time)
        TALLY[0].add(woke, time.time() - until)

    @app.task(name="bench-plain")
    def plain(due: float) -> None:
        TALLY[0].add(time.time() - due)

    @app.task(name="bench-waiter")
    def waiter() -> object:
        job = deferq.current_job()
        assert job is not None
        return job.wait_for("go", "bench-go", "all", 3600)

    lines = [step_costs(app)] if "steps" in parts else []
    worker = Worker(app, WorkerConfig(queues=("default",), concurrency=8, idle_wait=0.05))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        for part in ("sleep", "sleep-step"):
            if part in parts:
                lines += sleepers_and_plain_jobs(app, sleeper, plain, count, part == "sleep-step")
        if "event" in parts:
            jobs = app.enqueue_many([waiter.call() for _ in range(count)])
            wait_until(lambda: scheduled(app) >= count, 600)
            started = time.perf_counter()
            woken = app.send_event("bench-go", "all", 1)
            sent = time.perf_counter()
            for job in jobs:
                app.wait(job.id, timeout=600)
            lines.append(f"one event to {woken} waiting jobs: sent in {sent - started:.2f} s, "
                         f"all finished {time.perf_counter() - started:.2f} s after it was sent")
    finally:
        worker.stop()
        thread.join(timeout=30)
        app.close()
    return [f"{url.split(':')[0]}: {line}" for line in lines]


def scheduled(app: deferq.App) -> int:
    return int(app.stats().get("default", {}).get("scheduled", 0))


def wait_until(predicate: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("the jobs did not reach their sleep or wait in time")
        time.sleep(0.05)


if __name__ == "__main__":
    chosen = sys.argv[3].split(",") if len(sys.argv) > 3 else PARTS
    for line in run(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10_000, chosen):
        print(line)
