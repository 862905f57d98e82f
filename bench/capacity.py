"""How deferq scales out, measured: what one job costs each part of a deployment, on
Redis topologies, on PostgreSQL and through `deferq serve`. docs/capacity.md turns
the figures into a sizing model.

    .venv/bin/python -m bench.capacity                          # everything (make bench-capacity)
    .venv/bin/python -m bench.capacity --only redis --jobs 5000
    .venv/bin/python -m bench.capacity --topologies single,cluster:3 --only redis

Redis (`--topologies`, default single, cluster:1, cluster:3, shards:1, shards:2,
shards:4): redis-servers of its own on free loopback ports (bench/redis_servers.py: no
persistence, so no other traffic counts in their CPU), jobs spread round robin over 6
queues whose hash slots put 2 on each master of a 3-master Cluster, and for each
topology: one producer enqueueing one call per job, one enqueueing 100 per call (each
call to one queue, the queue turning), and 2 worker processes (16 threads each)
draining no-op jobs, each consuming 3 of the queues. Reported: jobs/s, the servers' CPU
per job (INFO cpu, summed over the servers) and the producer's or the workers' CPU per
job (the workers' as the difference between two runs of different sizes, so their
start-up is not counted).
PostgreSQL (bench/capacity_pg.py) and `deferq serve` (bench/capacity_serve.py): see
those modules. Each cell is the median of --runs runs (3), taken round robin. The
tables go to stdout and to bench/results/capacity.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from deferq import App, bench

from .redis_servers import Topology, flush, server_cpu, spread_queues, started, stop

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = "single,cluster:1,cluster:3,shards:1,shards:2,shards:4"
QUEUES = spread_queues(per_range=2)  # 6 queues, 2 per master of a 3-master Cluster
WORKERS = 2  # worker processes, one per core of the machine these figures come from
THREADS = 16  # per worker process, as `deferq bench`
BATCH = 100
PARTS = ("redis", "postgres", "serve")

Figures = dict[Any, dict[str, float]]  # per workload (or server processes): its measures


def medians(runs: list[Figures]) -> Figures:
    """Each measure's median over the runs."""
    return {key: {m: statistics.median(run[key][m] for run in runs) for m in runs[0][key]} for key in runs[0]}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def phase(jobs: int, run: Callable[[], float], store_cpu: Callable[[], float],
          side_cpu: Callable[[], float]) -> dict[str, float]:  # fmt: skip
    """jobs/s of `run`, and the store's and the measured side's CPU per job in µs."""
    before_store, before_side = store_cpu(), side_cpu()
    rate = run()
    return {"rate": rate, "server_us": (store_cpu() - before_store) / jobs * 1e6,
            "client_us": (side_cpu() - before_side) / jobs * 1e6}  # fmt: skip


def marginal(runs: dict[int, dict[str, float]]) -> dict[str, float]:
    """The larger run's rate; CPU per job of the difference between the two runs, so
    what both spend once (worker start-up, imports) cancels out."""
    small, large = sorted(runs)
    costs = {key: (runs[large][key] * large - runs[small][key] * small) / (large - small)
             for key in ("server_us", "client_us")}  # fmt: skip
    return {"rate": runs[large]["rate"], **costs}


# -- jobs spread over queues ------------------------------------------------------------


def enqueue_spread(app: App, jobs: int, batched: bool, **options: Any) -> float:
    """jobs/s of one producer: one call per job, or 100 per call; the queue turns with
    each call. `options` are job options (durable=False)."""
    tasks = [app.tasks["bench_noop"].options(queue=queue, **options) for queue in QUEUES]
    started_at = time.perf_counter()
    if batched:
        for call, first in enumerate(range(0, jobs, BATCH)):
            task = tasks[call % len(tasks)]
            app.enqueue_many([task.call(i, bench.ARG) for i in range(first, min(first + BATCH, jobs))])
    else:
        for i in range(jobs):
            tasks[i % len(tasks)].enqueue(i, bench.ARG)
    return bench.rate(jobs, time.perf_counter() - started_at)


def succeeded(app: App) -> int:
    stats = app.stats()
    return sum(stats.get(queue, {}).get("succeeded", 0) for queue in QUEUES)


def process_spread(app: App, url: str, jobs: int) -> float:
    """No-op jobs spread over the queues first, then WORKERS worker processes, worker k
    consuming every WORKERS-th queue; rate = (N-1) / (last finish - first finish)."""
    tasks = [app.tasks["bench_noop"].options(queue=queue) for queue in QUEUES]
    first_ids: list[str] = []
    for call, first in enumerate(range(0, jobs, 1000)):
        task = tasks[call % len(tasks)]
        made = app.enqueue_many([task.call(i, bench.ARG) for i in range(first, min(first + 1000, jobs))])
        if call < len(tasks):
            first_ids += [job.id for job in made[:32]]
    with spread_workers(url):
        deadline = time.monotonic() + max(120, jobs / 200)
        while succeeded(app) < jobs:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {succeeded(app)} of {jobs} jobs finished")
            time.sleep(0.25)  # the rate comes from finish times in the store, not from this loop
    firsts = [job.finished_at for job in map(app.get, first_ids) if job and job.finished_at]
    lasts = [jobs_[0].finished_at for q in QUEUES if (jobs_ := app.list_jobs("succeeded", q, limit=1))]
    return bench.rate(jobs - 1, max(t for t in lasts if t) - min(firsts))


@contextmanager
def spread_workers(url: str) -> Iterator[None]:
    """WORKERS `deferq worker` processes, worker k on queues k, k+WORKERS, ...; stopped
    (and reaped) on exit."""
    procs = []
    try:
        for k in range(WORKERS):
            queues = [arg for queue in QUEUES[k::WORKERS] for arg in ("-q", queue)]
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "deferq.cli", "worker", "--app", "deferq.bench:app", "--url", url,
                 *queues, "-c", str(THREADS), "--log-level", "warning"],
                env={**os.environ, "DEFERQ_URL": url}, stdout=subprocess.DEVNULL,
            ))  # fmt: skip
        yield
    finally:
        stop(procs)


def measure_topology(topology: Topology, jobs: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    with started(topology) as ports:
        url = topology.url(ports)
        app = bench.app
        app.close()
        app.url = url
        store = lambda: server_cpu(ports)  # noqa: E731

        def fresh() -> None:
            flush(ports)
            app.close()  # forget what the backend knew of the servers (its queue registry)

        enqueue_spread(app, 200, batched=False)  # connect, load the scripts: untimed
        fresh()
        out["enqueue"] = phase(jobs, lambda: enqueue_spread(app, jobs, batched=False), store, own_cpu)
        fresh()
        out["batch"] = phase(jobs, lambda: enqueue_spread(app, jobs, batched=True), store, own_cpu)
        runs = {}
        for size in (max(1000, jobs // 4), jobs):
            fresh()
            runs[size] = phase(size, lambda size=size: process_spread(app, url, size),  # type: ignore[misc]
                               store, children_cpu)  # fmt: skip
        out["process"] = marginal(runs)
        app.close()
    return out


def render_redis(results: dict[Topology, dict[str, dict[str, float]]]) -> list[str]:
    lines = ["| topology | enqueue one call/s | enqueue 100 per call/s | 2 workers, no-op jobs/s "
             "| Redis CPU µs/job (one call / batched / processing) "
             "| producer CPU µs/job (one call / batched) | worker CPU µs/job |",
             "|---|---:|---:|---:|---|---|---:|"]  # fmt: skip
    for topology, m in results.items():
        e, b, p = m["enqueue"], m["batch"], m["process"]
        lines.append(f"| {topology.label} | {e['rate']:,.0f} | {b['rate']:,.0f} | {p['rate']:,.0f} "
                     f"| {e['server_us']:.1f} / {b['server_us']:.1f} / {p['server_us']:.1f} "
                     f"| {e['client_us']:.1f} / {b['client_us']:.1f} | {p['client_us']:.1f} |")  # fmt: skip
    return lines


def heading(jobs: int) -> str:
    load = os.getloadavg()
    return (f"bench/capacity.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, load average {load[0]:.1f} at the end (the VM is shared "
            f"with other work); {jobs:,} jobs per figure")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--only", default=",".join(PARTS), help="parts: redis, postgres, serve (default all)")
    parser.add_argument("--topologies", default=TOPOLOGIES, help=f"Redis topologies (default {TOPOLOGIES})")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per figure (default 20000)")
    parser.add_argument("--runs", type=int, default=3, help="runs; each cell is their median (default 3)")
    parser.add_argument("--serve-processes", default="1,2,4", help="deferq serve --workers values (default 1,2,4)")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds of HTTP load per figure (default 8)")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "capacity.md"))
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    if unknown := [p for p in parts if p not in PARTS]:
        parser.error(f"unknown part {unknown[0]!r}: choose from {', '.join(PARTS)}")
    try:
        topologies = [Topology.parse(t) for t in args.topologies.split(",") if t.strip()]
    except ValueError as exc:
        parser.error(str(exc))
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.jobs < 4000:
        parser.error("--jobs must be at least 4000 (the workers' CPU is a difference of two runs)")
    sections: list[str] = []
    started_at = time.time()
    if "redis" in parts:
        runs: dict[Topology, list[Figures]] = {t: [] for t in topologies}
        for number in range(args.runs):  # round robin: a noisy minute hits every topology alike
            for topology in topologies:
                print(f"run {number + 1}/{args.runs}: {topology.label} ...", file=sys.stderr, flush=True)
                runs[topology].append(measure_topology(topology, args.jobs))
        sections += ["### Redis topologies", "", *render_redis({t: medians(r) for t, r in runs.items()}), ""]
    if "postgres" in parts:
        from . import capacity_pg

        print("PostgreSQL ...", file=sys.stderr, flush=True)
        pg = medians([capacity_pg.measure(args.jobs) for _ in range(args.runs)])
        sections += ["### PostgreSQL", "", *capacity_pg.render(pg), ""]
    if "serve" in parts:
        from . import capacity_serve

        counts = [int(c) for c in args.serve_processes.split(",") if c.strip()]
        print(f"deferq serve with {counts} processes ...", file=sys.stderr, flush=True)
        served = medians([capacity_serve.measure(counts, args.seconds) for _ in range(args.runs)])
        sections += ["### deferq serve", "", *capacity_serve.render(served), ""]
    sections.append(f"Medians of {args.runs} run(s); the whole run took {time.time() - started_at:.0f} s.")
    text = "\n".join([heading(args.jobs), "", *sections])
    print(text)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(text)
    print(f"written to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
