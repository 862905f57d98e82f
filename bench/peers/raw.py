"""The physical reference: plain redis-py, no library. LPUSH a JSON message per job
(A), 100 LPUSHes per pipeline (A batch), and `python -m bench.peers.raw` worker
processes that BRPOP a message and run its probe body (B, D). No scheduler (C).

For the drains and the producer references of bench/speed.py: PAYLOAD, a no-op job's
message formatted once, LPUSHed in a loop or in pipelines, and `python -m
bench.peers.raw --drain 16`, a process that runs `RPOP key 16` and the messages'
bodies in a loop until the list is empty."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import redis

from . import base, probe

QUEUE = "raw:queue"
BODIES = {"noop": probe.noop, "incr": probe.incr, "stamp": probe.stamp}
PAYLOAD = json.dumps(["noop", [0, "x" * 30]], separators=(",", ":")).encode()  # 45 bytes, formatted once


def lpush_loop(r: redis.Redis, jobs: int) -> float:
    """Jobs/s of one LPUSH of PAYLOAD per call."""
    started = time.perf_counter()
    for _ in range(jobs):
        r.lpush(QUEUE, PAYLOAD)
    return jobs / (time.perf_counter() - started)


def lpush_pipelined(r: redis.Redis, jobs: int, size: int = 1000) -> float:
    """Jobs/s of pipelines of `size` LPUSHes of PAYLOAD."""
    started = time.perf_counter()
    for first in range(0, jobs, size):
        pipe = r.pipeline(transaction=False)
        for _ in range(first, min(first + size, jobs)):
            pipe.lpush(QUEUE, PAYLOAD)
        pipe.execute()
    return jobs / (time.perf_counter() - started)


class Peer(base.Peer):
    name = "raw"
    label = "raw redis-py (LPUSH loop / pipelined / BRPOP+INCR loop)"
    dists = ("redis", "hiredis")
    batch = True
    delays = False

    def open(self) -> None:
        self.redis = redis.Redis.from_url(probe.REDIS_URL)

    def close(self) -> None:
        if getattr(self, "redis", None) is not None:
            self.redis.close()

    def send(self, task: str, args: tuple[Any, ...], due: float | None = None) -> None:
        self.redis.lpush(QUEUE, json.dumps([task, args]))

    def send_batch(self, task: str, args: Sequence[tuple[Any, ...]], due: float | None = None) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for one in args:
            pipe.lpush(QUEUE, json.dumps([task, one]))
        pipe.execute()

    def worker_commands(self) -> list[list[str]]:
        return [[sys.executable, "-m", "bench.peers.raw"]] * base.WORKER_PROCESSES


def work() -> None:
    """BRPOP one message at a time and run it, until killed."""
    r = redis.Redis.from_url(probe.REDIS_URL)
    while True:
        popped = r.brpop([QUEUE], timeout=1)
        if popped:
            task, args = json.loads(popped[1])
            BODIES[task](*args)


def drain(batch: int) -> None:
    """`RPOP key batch` and run the messages, until the list is empty; then exit."""
    r = redis.Redis.from_url(probe.REDIS_URL)
    while popped := r.rpop(QUEUE, batch):
        for message in popped:
            task, args = json.loads(message)
            BODIES[task](*args)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--drain":  # python -m bench.peers.raw --drain BATCH
        drain(int(sys.argv[2]))
    else:
        work()
