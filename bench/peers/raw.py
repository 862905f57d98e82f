"""The physical reference: plain redis-py, no library. LPUSH a JSON message per job
(A), 100 LPUSHes per pipeline (A batch), and `python -m bench.peers.raw` worker
processes that BRPOP a message and run its probe body (B, D). No scheduler (C)."""

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


def work_batched(batch: int, total: int) -> None:
    """RPOP up to `batch` messages per round trip (BRPOP when none is left) and run them;
    the first and the last of `total` completions note their time, as `probe.incr`
    does, so start-up is not measured (bench/speed.py's reference for a worker)."""
    r = redis.Redis.from_url(probe.REDIS_URL)
    while True:
        popped = r.rpop(QUEUE, batch)
        if not popped:
            one = r.brpop([QUEUE], timeout=1)
            popped = [one[1]] if one else []
        first = 0.0
        for message in popped:
            task, args = json.loads(message)
            BODIES[task](*args)
            first = first or time.time()
        if popped:
            done = r.incrby(probe.COUNT, len(popped))
            if done == len(popped):
                r.rpush(probe.FIRST, first)
            if done >= total > done - len(popped):
                r.rpush(probe.LAST, time.time())


if __name__ == "__main__":
    if len(sys.argv) == 3:  # python -m bench.peers.raw BATCH TOTAL
        work_batched(int(sys.argv[1]), int(sys.argv[2]))
    else:
        work()
