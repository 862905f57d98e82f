"""The workloads of PEERS.md, timed the same way for every peer.

A: one library call per job (args: an int and a 32-character string), jobs/s.
A batch: the library's batch call, 100 jobs per call, jobs/s.
B: `total` incr jobs enqueued first, then the workers start; (N-1) / (last - first
   completion), so worker start-up is not counted.
C: 500 stamp jobs all due 2 s ahead; how late each starts (p50/p99 ms).
D: idle workers, one stamp job at a time; enqueue-to-start (p50/p99 ms).
RSS: the workers' resident memory after all of that, summed over their processes.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from deferq.cli.bench import percentiles  # the same p50/p99 as `deferq bench`

from . import probe
from .base import Peer
from .workers import Workers

BATCH_SIZE = 100
DELAYED_JOBS = 500
DELAY_AHEAD = 2.0  # seconds
STALL_AFTER = 30.0  # seconds without progress before a workload gives up
PICKUP_GAP = 0.02  # seconds between D's jobs, so the workers are idle again
PICKUP_BUDGET = 60.0  # seconds D may take (arq polls every 0.5 s)
PICKUP_MIN = 20  # samples D takes whatever its budget


@dataclass
class Sizes:
    jobs: int = 20_000  # A, A batch, B
    pickups: int = 200  # D samples
    delayed: int = DELAYED_JOBS  # C: jobs due at one moment


def driver() -> redis.Redis:
    return redis.Redis.from_url(probe.REDIS_URL, decode_responses=True)


def noop_args(count: int) -> list[tuple[int, str]]:
    return [(n, secrets.token_hex(16)) for n in range(count)]


def enqueue_rate(peer: Peer, count: int, batched: bool) -> float:
    """A or A batch: jobs/s of `count` noop jobs (a few untimed calls first)."""
    if (own := peer.enqueue_rate(count, batched)) is not None:
        return own
    args = noop_args(count)
    send: Callable[[list[tuple[int, str]]], None]
    if batched:
        send = lambda chunk: peer.batches("noop", chunk, BATCH_SIZE)  # noqa: E731
    else:
        send = lambda chunk: peer.each("noop", chunk)  # noqa: E731
    send(args[:BATCH_SIZE])
    started = time.perf_counter()
    send(args)
    return count / (time.perf_counter() - started)


def prefill(peer: Peer, total: int) -> None:
    args = [(total,)] * total
    if peer.batch:
        peer.batches("incr", args, BATCH_SIZE)
    else:
        peer.each("incr", args)


def processing_rate(r: redis.Redis, total: int, workers: Workers) -> float:
    """B: wait for the incr job that completes the count; (N-1)/(last - first)."""
    return processing(r, total, workers)[0]


def processing(r: redis.Redis, total: int, workers: Workers) -> tuple[float, float]:
    """B's rate, and the workers' CPU microseconds per job counted from the first job done
    to the last (start-up excluded by construction: a separate start-up run to subtract
    varies by more than a short run's whole CPU on a busy machine)."""
    cpu_at, done_at = first_progress(r, workers)
    seen, progressed = done_at, time.monotonic()
    while True:
        workers.check()
        popped = r.blpop([probe.LAST], timeout=0.5)
        if popped:
            cpu = (workers.cpu_seconds() - cpu_at) * 1e6 / max(total - done_at, 1)
            last = float(popped[1])
            first = float(r.lindex(probe.FIRST, 0) or last)
            return (total - 1) / max(last - first, 1e-9), cpu
        count = int(r.get(probe.COUNT) or 0)
        if count != seen:
            seen, progressed = count, time.monotonic()
        elif time.monotonic() - progressed > STALL_AFTER:
            raise TimeoutError(f"stalled at {count}/{total} jobs for {STALL_AFTER:.0f} s")


def first_progress(r: redis.Redis, workers: Workers) -> tuple[float, int]:
    """The workers' CPU seconds and the count of jobs done when the first job is seen done."""
    progressed = time.monotonic()
    while time.monotonic() - progressed < STALL_AFTER:
        workers.check()
        count = int(r.get(probe.COUNT) or 0)
        if count:
            return workers.cpu_seconds(), count
        time.sleep(0.002)
    raise TimeoutError(f"no job done {STALL_AFTER:.0f} s after the workers started")


def delay_lateness(peer: Peer, r: redis.Redis, workers: Workers, count: int = DELAYED_JOBS) -> tuple[float, float]:
    """C: `count` jobs (500) due at one moment 2 s ahead; p50/p99 of start minus due, in ms."""
    r.delete(probe.LATE)
    due = time.time() + DELAY_AHEAD
    if peer.due_whole_seconds:
        due = math.ceil(due)
    if peer.batch_due:  # the scheduler is measured here, not enqueue speed
        peer.batches("stamp", [(due,)] * count, BATCH_SIZE, due)
    else:
        peer.each("stamp", [(due,)] * count, due)
    if time.time() > due:
        raise RuntimeError(f"enqueueing {count} delayed jobs took over {DELAY_AHEAD} s")
    late = wait_for_list(r, probe.LATE, count, workers)
    return percentiles(late)


def wait_for_list(r: redis.Redis, key: str, count: int, workers: Workers) -> list[float]:
    seen, progressed = 0, time.monotonic()
    while (length := r.llen(key)) < count:
        workers.check()
        if length != seen:
            seen, progressed = length, time.monotonic()
        elif time.monotonic() - progressed > STALL_AFTER:
            raise TimeoutError(f"only {length}/{count} jobs started after {STALL_AFTER:.0f} s")
        time.sleep(0.05)  # polls only the result list; the workers' timing is unaffected
    return [float(v) for v in r.lrange(key, 0, -1)]


def pickup_latency(peer: Peer, r: redis.Redis, workers: Workers, samples: int) -> tuple[float, float]:
    """D: one stamp job at a time to idle workers; p50/p99 of enqueue-to-start, in ms."""
    r.delete(probe.LATE)
    latencies: list[float] = []
    started = time.monotonic()
    while len(latencies) < samples:
        if len(latencies) >= PICKUP_MIN and time.monotonic() - started > PICKUP_BUDGET:
            break
        time.sleep(PICKUP_GAP)
        peer.send_stamp()
        popped = r.blpop([probe.LATE], timeout=STALL_AFTER)
        if not popped:
            workers.check()
            raise TimeoutError(f"a job was not picked up within {STALL_AFTER:.0f} s")
        latencies.append(float(popped[1]))
    return percentiles(latencies)
