"""procrastinate 3 on PostgreSQL: `task.defer`, `task.batch_defer`, `schedule_at` for C,
and two `procrastinate worker` processes (library defaults: LISTEN/NOTIFY, 1 job at a
time per worker). Its store is a database of our own, dropped and made anew between
workloads; the probe bodies still report to Redis, as for every peer."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from procrastinate import App, PsycopgConnector

from . import base, probe

URL = os.environ.get("BENCH_PROCRASTINATE_URL", "postgresql://postgres@127.0.0.1:5432/bench_peers_procrastinate")

app = App(connector=PsycopgConnector(conninfo=URL))


@app.task(name="noop")
async def noop(n: int, text: str) -> None:
    return None


@app.task(name="incr")
async def incr(total: int) -> None:
    await probe.incr_async(probe.async_client(), total)


@app.task(name="stamp")
async def stamp(t0: float) -> None:
    await probe.stamp_async(probe.async_client(), t0)


TASKS = {"noop": noop, "incr": incr, "stamp": stamp}
PARAMS = {"noop": ("n", "text"), "incr": ("total",), "stamp": ("t0",)}  # it takes kwargs only


class Peer(base.Peer):
    name = "procrastinate"
    label = "procrastinate (PostgreSQL)"
    dists = ("procrastinate", "psycopg")
    store = URL
    batch = True
    batch_due = True

    def open(self) -> None:
        app.open()
        with psycopg.connect(URL) as conn:
            exists = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
        if exists is None or exists[0] is None:
            app.schema_manager.apply_schema()

    def close(self) -> None:
        app.close()

    def send(self, task: str, args: tuple[Any, ...], due: float | None = None) -> None:
        kwargs = dict(zip(PARAMS[task], args, strict=True))
        if due is None:
            TASKS[task].defer(**kwargs)
        else:
            TASKS[task].configure(schedule_at=datetime.fromtimestamp(due, UTC)).defer(**kwargs)

    def send_batch(self, task: str, args: Sequence[tuple[Any, ...]], due: float | None = None) -> None:
        at = None if due is None else datetime.fromtimestamp(due, UTC)
        deferrer = TASKS[task].configure(schedule_at=at)
        deferrer.batch_defer(*(dict(zip(PARAMS[task], one, strict=True)) for one in args))

    def worker_commands(self) -> list[list[str]]:
        command = [base.cli("procrastinate"), "--app", "bench.peers.procrastinate_pg.app",
                   "--log-level", "warning", "worker"]
        return [command] * base.WORKER_PROCESSES
