"""RQ: `queue.enqueue`, `queue.enqueue_many` (pipelined), `enqueue_at` for C, and two
`rq worker --with-scheduler` processes: SimpleWorker (runs jobs in the worker process)
for every workload, plus B again with RQ's default worker, which forks per job."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import redis
from rq import Queue

from . import base, probe

FUNCTIONS = {"noop": probe.noop, "incr": probe.incr, "stamp": probe.stamp}
FORK_JOBS = 5_000  # forking per job runs ~100 jobs/s here: B on fewer jobs keeps the run short


class Peer(base.Peer):
    name = "rq"
    label = "rq (SimpleWorker / default fork per job)"
    dists = ("rq",)
    batch = True
    alt_b = ("fork per job", FORK_JOBS)

    def open(self) -> None:
        self.queue = Queue("default", connection=redis.Redis.from_url(probe.REDIS_URL))

    def close(self) -> None:
        if getattr(self, "queue", None) is not None:
            self.queue.connection.close()

    def send(self, task: str, args: tuple[Any, ...], due: float | None = None) -> None:
        if due is None:
            self.queue.enqueue(FUNCTIONS[task], *args)
        else:
            self.queue.enqueue_at(datetime.fromtimestamp(due, UTC), FUNCTIONS[task], *args)

    def send_batch(self, task: str, args: Sequence[tuple[Any, ...]], due: float | None = None) -> None:
        self.queue.enqueue_many([Queue.prepare_data(FUNCTIONS[task], one) for one in args])

    def _workers(self, *worker_class: str) -> list[list[str]]:
        command = [base.cli("rq"), "worker", "--url", probe.REDIS_URL, "--with-scheduler",
                   "--logging_level", "WARNING", *worker_class, "default"]
        return [command] * base.WORKER_PROCESSES

    def worker_commands(self) -> list[list[str]]:
        return self._workers("-w", "rq.worker.SimpleWorker")

    def alt_worker_commands(self) -> list[list[str]]:
        return self._workers()
