"""A supervised worker process: `python -m deferq.supervisor.child '<json spec>'`.

The master starts each child as a fresh interpreter rather than a fork: the master runs
threads (alert delivery) and holds open store connections (SQLite handles, Redis and
SQL sockets), none of which survive a fork safely, and a fresh interpreter loads the
current code of the tasks, which is what a rolling restart after SIGHUP is for.

Exit codes are the worker's: 0 stopped, 1 unexpected error, 3 a sync job overran its
timeout (the master replaces the process).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import orjson
from setproctitle import setproctitle

from ..loading import load_app
from ..observe.logs import setup_logging
from ..worker.memory import limit_arenas
from ..worker.orphans import stop_when_orphaned
from ..worker.worker import EXIT_ERROR, Worker, WorkerConfig

METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"


def child_title(pool: str, index: int) -> str:
    return f"deferq: worker {pool} #{index}"


def run_child(spec: dict[str, Any]) -> int:
    limit_arenas()
    setproctitle(child_title(spec["pool"], spec["index"]))
    setup_logging(spec.get("log_level", "info"), spec.get("log_format", "text"))
    if spec.get("metrics_dir"):  # before anything imports prometheus_client: it reads it then
        os.environ[METRICS_DIR_ENV] = spec["metrics_dir"]
    app = load_app(spec["app"], spec["url"])
    if spec.get("metrics_dir"):
        from ..worker.metrics import WorkerMetrics

        app.add_middleware(WorkerMetrics())  # the master serves the sum of every child's
    config = WorkerConfig(
        queues=tuple(spec["queues"]),
        concurrency=spec["concurrency"],
        max_jobs=spec.get("max_jobs"),
        grace=spec["grace"],
        name=spec["name"],
    )
    worker = Worker(app, config)
    # Signals sent to the whole process group (a terminal hangup, `kill -HUP -PGID`) are
    # the master's business: a reload restarts children itself; USR2 stops like TERM.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGUSR2, lambda *_: worker.stop())
    stop_when_orphaned(worker, spec.get("master_pid") or os.getppid())  # a master killed with SIGKILL
    return worker.run()


def main() -> None:
    try:
        code = run_child(orjson.loads(sys.argv[1]))
    except Exception as exc:  # noqa: BLE001 - one line for the master's log, then exit 1
        print(f"deferq worker could not start: {exc}", file=sys.stderr)
        code = EXIT_ERROR
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # never wait for a hung job's thread


if __name__ == "__main__":
    main()
