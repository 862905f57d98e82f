"""PostgreSQL's share of a job, measured on a PostgreSQL server of the benchmark's own.

`initdb` into a temporary folder and a `postgres` on a free loopback port (as the
`postgres` user when run as root; default settings, so commits are durable), so that
the CPU counted is ours alone: the postmaster's and all its children's (/proc), not the
shared server's that other work uses. Figures, with the jobs spread over the same
queues as on Redis: one producer enqueueing one call per job, durable (the default)
and `durable=False`; 100 per call; 2 worker processes draining no-op jobs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from deferq.cli import bench

from .http import tree_cpu
from .redis_servers import free_port, stop
from .spread import children_cpu, enqueue_spread, marginal, own_cpu, phase, process_spread

START_TIMEOUT = 30.0


def _as_postgres() -> list[str]:
    """PostgreSQL refuses to run as root: run its programs as the `postgres` user then."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not on PATH: the PostgreSQL figures need a PostgreSQL server installed")
    return found


@contextmanager
def server() -> Iterator[tuple[str, int]]:
    """A fresh PostgreSQL server: its URL and the pid whose process tree is the server."""
    folder = tempfile.mkdtemp(prefix="deferq-capacity-pg-")
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    data, port = f"{folder}/data", free_port()
    proc = None
    try:
        subprocess.run([*_as_postgres(), _binary("initdb"), "-D", data, "-A", "trust", "-U", "postgres",
                        "-E", "UTF8", "--no-sync"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
        proc = subprocess.Popen(
            [*_as_postgres(), _binary("postgres"), "-D", data, "-p", str(port), "-k", folder,
             "-c", "listen_addresses=127.0.0.1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        _wait_ready(url, proc)
        yield url, proc.pid
    finally:
        if proc is not None:
            stop([proc])  # runuser passes SIGTERM on: the postmaster's smart shutdown
        shutil.rmtree(folder, ignore_errors=True)


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    import psycopg

    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the benchmark's PostgreSQL server did not start") from None
            time.sleep(0.1)


def measure(jobs: int) -> dict[str, dict[str, float]]:
    import psycopg

    out: dict[str, dict[str, float]] = {}
    with server() as (url, pid):
        app = bench.app
        store = lambda: tree_cpu(pid)  # noqa: E731
        databases = iter(range(1000))

        def fresh() -> None:
            """A new database for each figure, its schema made before the timing starts."""
            name = f"figure{next(databases)}"
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {name}")
            app.close()
            app.url = url.rsplit("/", 1)[0] + "/" + name
            app.tasks["bench_noop"].options(queue="warm-up").enqueue(0, bench.ARG)  # no worker takes it

        fresh()
        out["enqueue"] = phase(jobs, lambda: enqueue_spread(app, jobs, batched=False), store, own_cpu)
        fresh()
        out["fast"] = phase(jobs, lambda: enqueue_spread(app, jobs, batched=False, durable=False),
                            store, own_cpu)
        fresh()
        out["batch"] = phase(jobs, lambda: enqueue_spread(app, jobs, batched=True), store, own_cpu)
        runs = {}
        for size in (max(1000, jobs // 4), jobs):
            fresh()
            runs[size] = phase(size, lambda size=size: process_spread(app, app.url, size),  # type: ignore[misc]
                               store, children_cpu)
        out["process"] = marginal(runs)
        app.close()
    return out


def render(m: dict[str, dict[str, float]]) -> list[str]:
    names = {"enqueue": "enqueue, one call per job (durable)", "fast": "enqueue, one call per job, durable=False",
             "batch": "enqueue, 100 per call", "process": "2 workers, no-op jobs"}
    lines = ["| workload | jobs/s | PostgreSQL CPU µs/job | producer or worker CPU µs/job |",
             "|---|---:|---:|---:|"]
    for key, label in names.items():
        one = m[key]
        lines.append(f"| {label} | {one['rate']:,.0f} | {one['server_us']:.1f} | {one['client_us']:.1f} |")
    return lines
