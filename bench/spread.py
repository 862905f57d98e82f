"""Jobs spread over queues, and what each side of a figure spends: the pieces that
bench/capacity_redis.py and bench/capacity_pg.py measure with.

Jobs go round robin over 6 queues whose hash slots put 2 on each master of a 3-master
Redis Cluster (consecutive queues on different masters); WORKERS worker processes,
worker k consuming every WORKERS-th queue. CPU is counted per job, in µs: the store's
(a callable the caller passes), the producer's (this process) or the workers' (the
children reaped since), so that figures from a busy machine can still be compared.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from deferq import App
from deferq.cli import bench

from .redis_servers import spread_queues, stop

ROOT = Path(__file__).resolve().parents[1]
QUEUES = spread_queues(per_range=2)  # 6 queues, 2 per master of a 3-master Cluster
WORKERS = 2  # worker processes, one per core of the machine these figures come from
THREADS = 16  # per worker process, as `deferq bench`
BATCH = 100

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
          side_cpu: Callable[[], float]) -> dict[str, float]:
    """jobs/s of `run`, and the store's and the measured side's CPU per job in µs."""
    before_store, before_side = store_cpu(), side_cpu()
    rate = run()
    return {"rate": rate, "server_us": (store_cpu() - before_store) / jobs * 1e6,
            "client_us": (side_cpu() - before_side) / jobs * 1e6}


def marginal(runs: dict[int, dict[str, float]]) -> dict[str, float]:
    """The larger run's rate; CPU per job of the difference between the two runs, so
    what both spend once (worker start-up, imports) cancels out."""
    small, large = sorted(runs)
    costs = {key: (runs[large][key] * large - runs[small][key] * small) / (large - small)
             for key in ("server_us", "client_us")}
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
                [sys.executable, "-m", "deferq", "worker", "--app", "deferq.cli.bench:app", "--url", url,
                 *queues, "-c", str(THREADS), "--log-level", "warning"],
                env={**os.environ, "DEFERQ_URL": url}, stdout=subprocess.DEVNULL,
            ))
        yield
    finally:
        stop(procs)
