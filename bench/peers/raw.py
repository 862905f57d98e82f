"""The physical reference: plain redis-py, no library. LPUSH a JSON message per job
(A), 100 LPUSHes per pipeline (A batch), and `python -m bench.peers.raw` worker
processes that BRPOP a message and run its probe body (B, D). No scheduler (C)."""

from __future__ import annotations

import json
import sys
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


if __name__ == "__main__":
    work()
