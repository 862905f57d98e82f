"""Huey on Redis: calling the task enqueues it, `task.map` for batches, `delay=` for C,
and one `huey_consumer -k process -w 2` (consumer, scheduler and 2 worker processes)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from huey import RedisHuey

from . import base, probe

huey = RedisHuey("bench", url=probe.REDIS_URL)
TASKS = {
    "noop": huey.task(name="noop")(probe.noop),
    "incr": huey.task(name="incr")(probe.incr),
    "stamp": huey.task(name="stamp")(probe.stamp),
}


class Peer(base.Peer):
    name = "huey"
    dists = ("huey",)
    batch = True
    tasks = TASKS

    def send(self, task: str, args: tuple[Any, ...], due: float | None = None) -> None:
        if due is None:
            self.tasks[task](*args)
        else:
            self.tasks[task].schedule(args, delay=max(0.0, due - time.time()))

    def send_batch(self, task: str, args: Sequence[tuple[Any, ...]], due: float | None = None) -> None:
        self.tasks[task].map(args)

    def worker_commands(self) -> list[list[str]]:
        return [[base.cli("huey_consumer"), "bench.peers.huey.huey", "-k", "process",
                 "-w", str(base.WORKER_PROCESSES), "-q"]]
