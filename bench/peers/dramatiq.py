"""Dramatiq on Redis: `actor.send`, `group(...).run()` for batches, `delay=` for C, and
one `dramatiq --processes 2` (default 8 threads each; a parent and 2 worker processes)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from . import base, probe

logging.getLogger("dramatiq").setLevel(logging.WARNING)
dramatiq.set_broker(RedisBroker(url=probe.REDIS_URL))
ACTORS = {
    "noop": dramatiq.actor(probe.noop, actor_name="noop"),
    "incr": dramatiq.actor(probe.incr, actor_name="incr"),
    "stamp": dramatiq.actor(probe.stamp, actor_name="stamp"),
}


class Peer(base.Peer):
    name = "dramatiq"
    dists = ("dramatiq",)
    batch = True
    batch_due = True

    def send(self, task: str, args: tuple[Any, ...], due: float | None = None) -> None:
        if due is None:
            ACTORS[task].send(*args)
        else:
            delay_ms = max(0, int((due - time.time()) * 1000))
            ACTORS[task].send_with_options(args=args, delay=delay_ms)

    def send_batch(self, task: str, args: Sequence[tuple[Any, ...]], due: float | None = None) -> None:
        delay_ms = None if due is None else max(0, int((due - time.time()) * 1000))
        dramatiq.group(ACTORS[task].message(*one) for one in args).run(delay=delay_ms)

    def worker_commands(self) -> list[list[str]]:
        return [[base.cli("dramatiq"), "bench.peers.dramatiq",
                 "--processes", str(base.WORKER_PROCESSES), "--skip-logging"]]
