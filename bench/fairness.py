"""Tenants behind one tenant's backlog: how long the small tenants wait.

    python -m bench.fairness --url redis://127.0.0.1:6379/11?prefix=fair --backlog 10000

Tenant A enqueues `--backlog` jobs, then tenants B-J `--each` jobs each; one worker of
8 slots (in this process) runs them, a task that only notes when it started. Printed:
the seconds from the worker's start until every B-J job has started, until the first
B-J job has, and until A's backlog is done, with the worker's rate. In enqueue order
(what every store does today) every B-J job waits behind all of A's.
"""

from __future__ import annotations

import argparse
import threading
import time

import deferq
from deferq.worker import Worker, WorkerConfig

TENANTS = "ABCDEFGHIJ"


def run(url: str, backlog: int, each: int) -> dict[str, float]:
    app = deferq.App(url)
    started: dict[str, list[float]] = {tenant: [] for tenant in TENANTS}
    lock = threading.Lock()

    @app.task(name="bench.fair", queue="fair")
    def work(tenant: str, i: int) -> None:
        with lock:
            started[tenant].append(time.monotonic())

    app.purge([deferq.JobState.SUCCEEDED])
    for first in range(0, backlog, 1000):
        app.enqueue_many([work.call("A", i) for i in range(first, min(first + 1000, backlog))])
    app.enqueue_many([work.call(tenant, i) for tenant in TENANTS[1:] for i in range(each)])
    worker = Worker(app, WorkerConfig(queues=("fair",), concurrency=8, burst=True))
    begun = time.monotonic()
    worker.run()
    small = [t for tenant in TENANTS[1:] for t in started[tenant]]
    total = backlog + each * (len(TENANTS) - 1)
    assert len(small) + len(started["A"]) == total, "every job ran"
    done = max(small + started["A"])
    app.purge([deferq.JobState.SUCCEEDED])
    app.close()
    return {"all_small_started_s": max(small) - begun, "first_small_started_s": min(small) - begun,
            "backlog_done_s": max(started["A"]) - begun, "jobs_per_s": total / (done - begun)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="sqlite:///fairness-bench.db")
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--each", type=int, default=10)
    args = parser.parse_args(argv)
    result = run(args.url, args.backlog, args.each)
    print(" ".join(f"{name}={value:.2f}" for name, value in result.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
