"""Chunk tasks against plain jobs: the same no-op work, as items of chunks of 100 and as
one job each, per store.

    .venv/bin/python -m bench.chunks [--items 20000] [--rounds 2] [--stores sqlite,redis,postgres]

Each round, per store: ITEMS jobs stored beforehand (enqueue_many, not timed), then a
`--burst` worker in this process (library defaults: 8 slots; polling every 50 ms, so that
its exit, a wait on the empty store, does not weigh on the time) runs them all; once as a
plain no-op task, once as a no-op chunk task (Chunk(size=100, wait=0.05)), in turn. Printed
per store and kind, the best round: items per second (items / seconds from the worker's
start to its exit), worker CPU per item (this process's CPU time: the worker's threads,
and SQLite's engine on SQLite), the store server's CPU per item (Redis: its `INFO cpu`,
so give the bench a Redis of its own; PostgreSQL: the server processes of the bench's
database, read from /proc: the server must run on this machine; SQLite has none apart
from the worker), and store calls per 100 items (the claims, settles and heartbeats of
the jobs, each one round trip to the store; a worker's own status and the limits'
reads, a few a second whatever the load, are not counted). The ratios are chunk over
plain. The machine and its load (bench/machine.py) are printed beside the figures.

BENCH_REDIS_URL names the Redis database to use (it is flushed): by default db 13 of
127.0.0.1:6379.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

import deferq
from deferq.worker import Worker, WorkerConfig

from . import machine
from .peers.stores import recreate_database

QUEUE = "chunkbench"
URLS = {
    "sqlite": "sqlite:///{folder}/chunks.db",
    "redis": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13") + "?prefix=chunkbench",
    "postgres": "postgresql://postgres@127.0.0.1:5432/bench_peers_chunks",
}
# The store calls on a job's path: each is one round trip (a store that does not do a
# settle and a claim in one reaches `settle` and `reserve` from `settle_and_reserve`: two).
JOB_CALLS = ("reserve", "wait_and_reserve", "wait_for_work", "settle", "settle_and_reserve", "settle_each",
             "heartbeat", "record_progress")


def noop(i: int) -> None:
    return None


def noop_chunk(items: list[int]) -> None:
    return None


def fresh(store: str, folder: str) -> str:
    url = URLS[store].format(folder=folder)
    if store == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{folder}/chunks.db{suffix}").unlink(missing_ok=True)
    elif store == "redis":
        redis.Redis.from_url(url.split("?")[0]).flushdb()
    else:
        recreate_database(url)
    return url


def counted(backend: Any) -> dict[str, int]:
    """Count the store's job calls (instance attributes over its methods)."""
    counts = dict.fromkeys(JOB_CALLS, 0)
    for name in JOB_CALLS:
        method = getattr(backend, name)

        def call(*args: Any, _name: str = name, _method: Callable[..., Any] = method, **kwargs: Any) -> Any:
            counts[_name] += 1
            return _method(*args, **kwargs)

        setattr(backend, name, call)
    return counts


def server_cpu(store: str, url: str) -> float | None:
    """The store server's CPU seconds so far (None: no server apart from this process).
    PostgreSQL: the server processes of the bench's database (a process gone since the
    last read is not counted, one new since is counted whole)."""
    if store == "redis":
        info = redis.Redis.from_url(url.split("?")[0]).info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    if store != "postgres":
        return None
    import psycopg

    with psycopg.connect(url) as conn:
        pids = [row[0] for row in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")]
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def one_run(store: str, folder: str, kind: str, items: int) -> dict[str, float]:
    url = fresh(store, folder)
    app = deferq.App(url)
    try:
        if kind == "chunk":
            task: Any = app.task(noop_chunk, queue=QUEUE, chunk=deferq.Chunk(size=100, wait=0.05))
        else:
            task = app.task(noop, queue=QUEUE)
        for start in range(0, items, 1000):
            app.enqueue_many([task.call(i) for i in range(start, min(items, start + 1000))])
        counts = counted(app.backend)
        # a burst worker exits after a wait on the empty store (up to two poll intervals,
        # 1 s each by default): polled every 50 ms, its exit adds little to the time measured
        worker = Worker(app, WorkerConfig(queues=(QUEUE,), burst=True, schedules=False, idle_wait=0.05))
        server = server_cpu(store, url)
        with machine.Load() as load:
            cpu, started = time.process_time(), time.perf_counter()
            worker.run()
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        server_after = server_cpu(store, url)
        done = app.stats()[QUEUE]["succeeded"]
        if done != items:
            raise RuntimeError(f"{store} {kind}: {done} of {items} jobs succeeded")
        server_us = -1.0  # no server apart from the worker
        if server is not None and server_after is not None:
            server_us = (server_after - server) / items * 1e6
        return {"rate": items / wall, "cpu_us": cpu / items * 1e6, "server_us": server_us,
                "trips": sum(counts.values()) / items * 100, "load": load.value}
    finally:
        app.close()


def best(runs: list[dict[str, float]]) -> dict[str, float]:
    return {"rate": max(r["rate"] for r in runs), "cpu_us": min(r["cpu_us"] for r in runs),
            "server_us": min(r["server_us"] for r in runs),
            "trips": min(r["trips"] for r in runs), "load": max(r["load"] for r in runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--stores", default="sqlite,redis,postgres")
    options = parser.parse_args()
    print(f"Chunk tasks against plain jobs, {options.items:,} no-op items, best of {options.rounds} round(s)")
    print(machine.describe())
    print()
    print("| store | kind | items/s | worker CPU per item | store server CPU per item | store calls per 100 items "
          "| load |")
    print("|---|---|---|---|---|---|---|")
    loads = []
    with tempfile.TemporaryDirectory() as folder:
        for store in options.stores.split(","):
            runs: dict[str, list[dict[str, float]]] = {"plain": [], "chunk": []}
            for _ in range(options.rounds):
                for kind in runs:
                    runs[kind].append(one_run(store, folder, kind, options.items))
            plain, chunk = best(runs["plain"]), best(runs["chunk"])
            for kind, m in (("plain", plain), ("chunks of 100", chunk)):
                server = f"{m['server_us']:.1f} us" if m["server_us"] >= 0 else "-"
                print(f"| {store} | {kind} | {m['rate']:,.0f} | {m['cpu_us']:.1f} us | {server} "
                      f"| {m['trips']:.2f} | {m['load']:.2f} |")
            load = max(plain["load"], chunk["load"])
            loads.append(load)
            print(f"| {store} | chunk / plain | {machine.ratio(chunk['rate'] / plain['rate'], load)} "
                  f"| {machine.ratio(plain['cpu_us'] / chunk['cpu_us'], load)} less | | | |")
    for line in machine.footnote(loads):
        print(line)


if __name__ == "__main__":
    main()
