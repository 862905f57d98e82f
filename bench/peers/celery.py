"""Celery on Redis: `task.delay`, `group(...).apply_async()` for batches, ETA for C,
and one `celery worker -c 2` (prefork pool, the default: a parent and 2 children)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from celery import Celery, group

from . import base, probe

app = Celery("bench", broker=probe.REDIS_URL)
TASKS = {
    "noop": app.task(name="noop")(probe.noop),
    "incr": app.task(name="incr")(probe.incr),
    "stamp": app.task(name="stamp")(probe.stamp),
}


class Peer(base.Peer):
    name = "celery"
    dists = ("celery", "kombu")
    batch = True
    batch_due = True

    def open(self) -> None:
        TASKS["noop"].delay(0, "")  # connect now, not inside the timed loop

    def close(self) -> None:
        app.close()

    def send(self, task: str, args: tuple[Any, ...], due: float | None = None) -> None:
        if due is None:
            TASKS[task].delay(*args)
        else:
            TASKS[task].apply_async(args, eta=datetime.fromtimestamp(due, UTC))

    def send_batch(self, task: str, args: Sequence[tuple[Any, ...]], due: float | None = None) -> None:
        eta = None if due is None else datetime.fromtimestamp(due, UTC)
        group(TASKS[task].s(*one) for one in args).apply_async(eta=eta)

    def worker_commands(self) -> list[list[str]]:
        return [[base.cli("celery"), "-A", "bench.peers.celery", "worker",
                 "-c", str(base.WORKER_PROCESSES), "-l", "WARNING"]]
