"""deferq itself, through its public API: `task.enqueue`, `app.enqueue_many`, and
one `deferq worker --app bench.peers.deferq:app --processes 2` (library defaults
otherwise)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from deferq import App

from . import base, probe

URL = os.environ.get("BENCH_DEFERQ_URL", probe.REDIS_URL)

app = App(URL)
noop = app.task(probe.noop, name="noop")
incr = app.task(probe.incr, name="incr")
stamp = app.task(probe.stamp, name="stamp")
TASKS = {"noop": noop, "incr": incr, "stamp": stamp}


class Peer(base.Peer):
    name = "deferq"
    dists = ("deferq",)
    batch = True
    batch_due = True

    def __init__(self, url: str = URL, label: str = "deferq") -> None:
        self.store = url
        self.label = label
        self.env = {"BENCH_DEFERQ_URL": url}

    def open(self) -> None:
        app.close()
        app.url = self.store
        app.backend  # noqa: B018  (connect now, not inside the timed loop)

    def close(self) -> None:
        app.close()

    def enqueue_rate(self, count: int, batched: bool) -> float | None:
        """A and A batch measured by `deferq bench`'s own functions, on this store."""
        from deferq.cli import bench

        bench.app.close()
        bench.app.url = self.store
        measure = bench.measure_batch if batched else bench.measure_enqueue
        try:
            measure(bench.app, 100, lambda done: None)  # connect and warm up, untimed
            return measure(bench.app, count, lambda done: None)
        finally:
            bench.app.close()

    def send(self, task: str, args: tuple[Any, ...], due: float | None = None) -> None:
        if due is None:
            TASKS[task].enqueue(*args)
        else:
            TASKS[task].options(at=due).enqueue(*args)

    def send_batch(self, task: str, args: Sequence[tuple[Any, ...]], due: float | None = None) -> None:
        call = (TASKS[task] if due is None else TASKS[task].options(at=due)).call
        app.enqueue_many([call(*one) for one in args])

    def worker_commands(self) -> list[list[str]]:
        """One command, 2 processes: the first forks the second once the App is loaded
        (as saq's --workers 2 does)."""
        return [[base.cli("deferq"), "worker", "--app", "bench.peers.deferq:app", "--url", self.store,
                 "--log-level", "warning", "--processes", str(base.WORKER_PROCESSES)]]
