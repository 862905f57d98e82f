"""The no-op drains, measured as someone outside the code would: the wall time of
processes that empty a queue and exit, less the same processes' time on an empty one.

- deferq: 2 `deferq worker --burst` processes, the command line's defaults (only
  `--app` and `--url` given), draining N no-op jobs enqueued before they start.
- raw: 2 `python -m bench.peers.raw --drain 16` processes (`RPOP key 16` and the
  messages' bodies in a loop until the list is empty), draining N copies of
  raw.PAYLOAD on the same Redis server.

Each rate is N / (seconds with N jobs - seconds on the empty queue, the lower of a start
just before and one just after: a busy machine only adds to a start's time, by tenths of
a second). A drain that took no longer than the start-up is an error: too few jobs to
tell. `make bench-speed`
and `make bench-peers` (Redis, when raw and deferq both run) print both and their ratio.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import redis

from deferq.cli import bench

from . import base, probe, raw
from .stores import reset
from .workers import Workers

PROCESSES = base.WORKER_PROCESSES
BATCH = 16  # the raw loop's RPOP count
JOBS = 50_000  # the jobs each drain empties unless told: the raw one takes ~0.1 s of them, quiet
TIMEOUT = 300.0  # seconds a drain may take


def burst_seconds(label: str, commands: list[list[str]]) -> float:
    """Wall seconds from starting `commands` to the last of them exiting by itself."""
    started = time.perf_counter()
    with Workers(label, commands, {}) as workers:
        workers.wait(TIMEOUT)
    return time.perf_counter() - started


def drained(label: str, commands: list[list[str]], jobs: int, fill: Callable[[], object],
            done: Callable[[], int]) -> dict[str, float]:
    """`commands` started on an empty queue, then on `jobs` jobs put there by `fill` (all
    of which `done` must count when they exit), then on the empty queue again: their rate
    less start-up, and the start-up (`label`: raw or deferq)."""
    before = burst_seconds(f"drain-{label}-empty", commands)
    fill()
    full = burst_seconds(f"drain-{label}", commands)
    if (count := done()) != jobs:
        raise RuntimeError(f"{label}'s processes exited with {count} of {jobs} jobs done")
    startup = min(before, burst_seconds(f"drain-{label}-empty", commands))
    if full <= startup:
        raise RuntimeError(f"{label}'s drain of {jobs} jobs took {full:.2f} s, its start-up {startup:.2f} s: "
                           "too few jobs to tell")
    return {label: jobs / (full - startup), f"startup_{label}": startup}


def deferq_drain(url: str, jobs: int) -> dict[str, float]:
    """`jobs` no-op jobs of deferq's bench app on `url` (a Redis database emptied first)."""
    command = [base.cli("deferq"), "worker", "--app", "deferq.cli.bench:app", "--url", url, "--burst"]
    bench.app.close()
    bench.app.url = url
    try:
        reset(url)
        task = bench.app.tasks["bench_noop"]

        def fill() -> None:
            for first in range(0, jobs, 1000):
                bench.app.enqueue_many([task.call(i, bench.ARG) for i in range(first, min(first + 1000, jobs))])

        return drained("deferq", [command] * PROCESSES, jobs, fill, lambda: bench.succeeded(bench.app))
    finally:
        bench.app.close()


def raw_drain(jobs: int) -> dict[str, float]:
    """`jobs` copies of raw.PAYLOAD in raw.QUEUE of the probe's database."""
    command = [sys.executable, "-m", "bench.peers.raw", "--drain", str(BATCH)]
    r = redis.Redis.from_url(probe.REDIS_URL)
    try:
        r.delete(raw.QUEUE)
        return drained("raw", [command] * PROCESSES, jobs, lambda: raw.lpush_pipelined(r, jobs),
                       lambda: jobs - r.llen(raw.QUEUE))
    finally:
        r.close()


def measure(url: str, jobs: int) -> dict[str, float]:
    """Both drains of `jobs` jobs, deferq's store at `url`, and deferq's rate / raw's."""
    try:
        out = deferq_drain(url, jobs) | raw_drain(jobs)
    finally:
        reset(url)
    out["ratio"] = out["deferq"] / out["raw"]
    return out
