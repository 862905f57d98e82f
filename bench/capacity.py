"""What one job costs each part of a deployment, and throughput on 1, 2 and 4 Redis shards.

    .venv/bin/python -m bench.capacity                 # 1, 2, 4 shards, 20,000 jobs each
    .venv/bin/python -m bench.capacity --shards 1,2 --jobs 5000

Starts its own `redis-server`s on loopback (ports 6391...; no persistence), so no
other traffic counts in their CPU time, and for each number of servers measures with
`deferq bench`'s workloads: enqueue one call per job, enqueue 100 per call, and 2
worker processes draining no-op jobs. For each it reports jobs/s, the Redis servers'
CPU per job (INFO cpu, summed over the servers) and the client's or the workers' CPU
per job (the workers' is the difference between two runs of different sizes, so
their start-up is not counted). docs/capacity.md turns these into a sizing model.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis

from deferq import bench

FIRST_PORT = 6391


@contextmanager
def servers(count: int) -> Iterator[list[int]]:
    """`count` redis-servers of our own, stopped (and reaped) on exit."""
    ports = [FIRST_PORT + i for i in range(count)]
    with tempfile.TemporaryDirectory(prefix="deferq-capacity-") as folder:
        procs = [
            subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", folder, "--logfile", ""],
                             stdout=subprocess.DEVNULL)  # fmt: skip
            for port in ports
        ]
        try:
            for port in ports:
                client = redis.Redis(port=port)
                deadline = time.monotonic() + 10
                while True:
                    try:
                        client.ping()
                        break
                    except redis.ConnectionError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.05)
            yield ports
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=10)


def url_of(ports: list[int]) -> str:
    if len(ports) == 1:
        return f"redis://127.0.0.1:{ports[0]}/0"
    return "redis+shards://" + ",".join(f"127.0.0.1:{port}/0" for port in ports)


def server_cpu(ports: list[int]) -> float:
    total = 0.0
    for port in ports:
        info = redis.Redis(port=port).info("cpu")
        total += info["used_cpu_user"] + info["used_cpu_sys"]
    return total


def flush(ports: list[int]) -> None:
    """Empty the servers, and forget what the backend knew of them (its queue registry)."""
    for port in ports:
        redis.Redis(port=port).flushdb()
    bench.app.close()


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def phase(ports: list[int], jobs: int, run: Callable[[], float], cpu: Callable[[], float]) -> dict[str, float]:
    """jobs/s of `run`, and the servers' and the measured side's CPU per job in µs."""
    before_server, before = server_cpu(ports), cpu()
    rate = run()
    return {"rate": rate, "server_us": (server_cpu(ports) - before_server) / jobs * 1e6,
            "client_us": (cpu() - before) / jobs * 1e6}  # fmt: skip


def measure(count: int, jobs: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    with servers(count) as ports:
        url = url_of(ports)
        bench.app.close()
        bench.app.url = url
        quiet: Callable[[int], None] = lambda n: None  # noqa: E731
        bench.measure_enqueue(bench.app, 200, quiet)
        flush(ports)
        out["enqueue"] = phase(ports, jobs, lambda: bench.measure_enqueue(bench.app, jobs, quiet), own_cpu)
        flush(ports)
        out["batch"] = phase(ports, jobs, lambda: bench.measure_batch(bench.app, jobs, quiet), own_cpu)
        flush(ports)
        small = max(1000, jobs // 4)
        runs = {}
        for size in (small, jobs):
            runs[size] = phase(ports, size, lambda size=size: bench.measure_process(  # type: ignore[misc]
                bench.app, url, size, 2, 16, quiet)[0], children_cpu)  # fmt: skip
            bench.clean(bench.app)
            flush(ports)
        marginal = {key: (runs[jobs][key] * jobs - runs[small][key] * small) / (jobs - small)
                    for key in ("server_us", "client_us")}  # fmt: skip
        out["process"] = {"rate": runs[jobs]["rate"], **marginal}
        bench.app.close()
    return out


def render(results: dict[int, dict[str, dict[str, float]]], jobs: int) -> str:
    lines = [f"bench/capacity.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {jobs} jobs per figure",
             "", "| Redis servers | workload | jobs/s | Redis CPU µs/job | client or worker CPU µs/job |",
             "|---:|---|---:|---:|---:|"]  # fmt: skip
    names = {"enqueue": "enqueue, one call per job", "batch": "enqueue, 100 per call",
             "process": "2 workers, no-op jobs"}  # fmt: skip
    for count, figures in results.items():
        for key, label in names.items():
            m = figures[key]
            lines.append(f"| {count} | {label} | {m['rate']:,.0f} | {m['server_us']:.1f} | {m['client_us']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--shards", default="1,2,4", help="numbers of redis-servers (default 1,2,4)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per figure (default 20000)")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.shards.split(",") if c.strip()]
    results: dict[int, Any] = {}
    for count in counts:
        print(f"{count} redis-server(s) ...", file=sys.stderr, flush=True)
        results[count] = measure(count, args.jobs)
    print(render(results, args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
