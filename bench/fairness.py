"""Tenants behind one tenant's backlog: how long the small tenants wait, with and without
fair queues, and what fairness costs a claim.

    python -m bench.fairness --url redis://127.0.0.1:6379/11?prefix=fair --backlog 10000

Tenant A enqueues `--backlog` jobs, then tenants B-J `--each` jobs each; one worker of
8 slots (in this process) runs them, a task that only notes when it started. Printed per
mode (`plain`: no fair key, every store's order before fair queues; `fair`:
`fair_key="tenant:{tenant}"`): the seconds from the worker's start until every B-J job
has started, until the first B-J job has, and until A's backlog is done, the worker's
rate, and how many jobs started before the last B-J job (a count, which the machine's
load does not blur). In enqueue order every B-J job waits behind all of A's; with fair keys
each tenant gets a job per round.

Then the claim's own cost (`--rounds` rounds, the modes interleaved): the same jobs
claimed 8 at a time by `reserve` straight on the store (each batch settled, untimed),
median microseconds per job claimed.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import deferq
from deferq.backends.base import Outcome
from deferq.job import Priority
from deferq.worker import Worker, WorkerConfig

TENANTS = "ABCDEFGHIJ"
MODES = ("plain", "fair")


def load(app: deferq.App, task: deferq.Task, backlog: int, each: int) -> None:
    app.purge([deferq.JobState.SUCCEEDED])
    for first in range(0, backlog, 1000):
        app.enqueue_many([task.call("A", i) for i in range(first, min(first + 1000, backlog))])
    app.enqueue_many([task.call(tenant, i) for tenant in TENANTS[1:] for i in range(each)])


def task_of(app: deferq.App, mode: str, started: dict[str, list[float]]) -> deferq.Task:
    """The bench's task in `mode` (only "plain" is declared: it runs on older deferq too)."""
    lock = threading.Lock()

    def work(tenant: str, i: int) -> None:
        with lock:
            started[tenant].append(time.monotonic())

    if mode == "fair":
        return app.task(name="bench.fair.keyed", queue="fair", fair_key="tenant:{tenant}")(work)
    return app.task(name="bench.fair.plain", queue="fair")(work)


def run(url: str, mode: str, backlog: int, each: int) -> dict[str, float]:
    app = deferq.App(url)
    started: dict[str, list[float]] = {tenant: [] for tenant in TENANTS}
    load(app, task_of(app, mode, started), backlog, each)
    worker = Worker(app, WorkerConfig(queues=("fair",), concurrency=8, burst=True))
    begun = time.monotonic()
    worker.run()
    small = [t for tenant in TENANTS[1:] for t in started[tenant]]
    total = backlog + each * (len(TENANTS) - 1)
    assert len(small) + len(started["A"]) == total, "every job ran"
    done = max(small + started["A"])
    starts = sorted((t, tenant) for tenant, times in started.items() for t in times)
    last_small = max(i for i, (_, tenant) in enumerate(starts) if tenant != "A")
    app.purge([deferq.JobState.SUCCEEDED])
    app.close()
    return {"all_small_started_s": max(small) - begun, "first_small_started_s": min(small) - begun,
            "backlog_done_s": max(started["A"]) - begun, "jobs_per_s": total / (done - begun),
            "last_small_start_position": last_small}


def claim_cost(url: str, mode: str, backlog: int, each: int) -> float:
    """Median microseconds per job of `reserve` (8 at a time) draining the load."""
    app = deferq.App(url)
    load(app, task_of(app, mode, {t: [] for t in TENANTS}), backlog, each)
    backend, per_job = app.backend, []
    while True:
        began = time.perf_counter()
        jobs = backend.reserve(["fair"], 8, "bench", 60.0, Priority.LEVELS)
        took = time.perf_counter() - began
        if not jobs:
            break
        per_job.append(took / len(jobs))
        backend.settle([Outcome(job, "succeeded") for job in jobs])
    app.purge([deferq.JobState.SUCCEEDED])
    app.close()
    return statistics.median(per_job) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="sqlite:///fairness-bench.db")
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--each", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the claim's cost")
    parser.add_argument("--mode", choices=(*MODES, "both"), default="both")
    parser.add_argument("--claims-only", action="store_true", help="only the claim's cost")
    args = parser.parse_args(argv)
    modes = MODES if args.mode == "both" else (args.mode,)
    for mode in () if args.claims_only else modes:
        result = run(args.url, mode, args.backlog, args.each)
        print(f"{mode}: " + " ".join(f"{name}={value:.2f}" if isinstance(value, float) else f"{name}={value}"
                                     for name, value in result.items()), flush=True)
    costs: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(args.rounds):
        for mode in modes:
            costs[mode].append(claim_cost(args.url, mode, args.backlog, args.each))
    for mode in modes if args.rounds else ():
        print(f"{mode}: claim_us_per_job median {statistics.median(costs[mode]):.1f} "
              f"(rounds: {', '.join(f'{c:.1f}' for c in costs[mode])})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
