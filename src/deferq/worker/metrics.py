"""Prometheus metrics of the jobs a worker runs, per task and queue: a middleware.

`deferq worker --metrics-port N` serves them; under `deferq run` every child writes to
prometheus-client's multiprocess directory and the master serves one aggregate.

- `deferq_task_runs_total{task,queue,outcome}`: finished attempts; outcome is
  succeeded, retried, dead or released (a graceful stop). Failed = retried + dead.
- `deferq_task_run_seconds{task,queue}`: how long the task function ran.
- `deferq_task_wait_seconds{task,queue}`: from the job's due time to its start. The due
  time is on the store's clock and the start on the worker's: skewed clocks skew it.
- `deferq_tasks_in_flight{task,queue}`: attempts running now.
- `deferq_chunk_calls_total{task,queue}`: calls of a chunk task (deferq.chunks); each
  job of a call is counted in the metrics above as any job.
- `deferq_chunk_call_items{task,queue}`: how many jobs a chunk task's call took.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from ..backends.base import OutcomeKind
from ..errors import MissingExtra
from ..middleware import Middleware

if TYPE_CHECKING:
    from ..backends.base import Outcome
    from ..job import Job

ITEM_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10_000)
RUN_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0, 1800.0, 3600.0)
OUTCOME_LABEL = {OutcomeKind.SUCCEEDED: "succeeded", OutcomeKind.RETRY: "retried",
                 OutcomeKind.DEAD: "dead", OutcomeKind.RELEASE: "released",
                 OutcomeKind.SNOOZE: "snoozed", OutcomeKind.CANCELLED: "cancelled"}


def prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise MissingExtra("metrics", "prometheus-client", needed_by="worker metrics") from None
    return prometheus_client


class WorkerMetrics(Middleware):
    """Counts, times and gauges every job this process runs."""

    def __init__(self, registry: Any = None) -> None:
        client = prometheus()
        labels = ["task", "queue"]
        kwargs: dict[str, Any] = {} if registry is None else {"registry": registry}
        self.runs = client.Counter("deferq_task_runs_total", "Finished attempts by task, queue and outcome",
                                   [*labels, "outcome"], **kwargs)
        self.run_seconds = client.Histogram("deferq_task_run_seconds", "Time the task function ran",
                                            labels, buckets=RUN_BUCKETS, **kwargs)
        self.wait_seconds = client.Histogram("deferq_task_wait_seconds", "From due time to start",
                                             labels, buckets=WAIT_BUCKETS, **kwargs)
        self.in_flight = client.Gauge("deferq_tasks_in_flight", "Attempts running now", labels,
                                      multiprocess_mode="livesum", **kwargs)
        self.chunk_calls = client.Counter("deferq_chunk_calls_total", "Calls of a chunk task", labels, **kwargs)
        self.chunk_items = client.Histogram("deferq_chunk_call_items", "Jobs a chunk task's call took", labels,
                                            buckets=ITEM_BUCKETS, **kwargs)
        self._started: dict[str, float] = {}
        self._lock = threading.Lock()

    def before_run(self, job: Job) -> None:
        self.wait_seconds.labels(job.task, job.queue).observe(max(0.0, time.time() - job.run_at))
        self.in_flight.labels(job.task, job.queue).inc()
        with self._lock:
            self._started[job.id] = time.perf_counter()

    def after_run(self, job: Job, outcome: Outcome, exc: BaseException | None) -> None:
        with self._lock:
            started = self._started.pop(job.id, None)
        if started is not None:
            self.in_flight.labels(job.task, job.queue).dec()
            self.run_seconds.labels(job.task, job.queue).observe(time.perf_counter() - started)

    def after_chunk(self, jobs: list[Job], seconds: float) -> None:
        first = jobs[0]
        self.chunk_calls.labels(first.task, first.queue).inc()
        self.chunk_items.labels(first.task, first.queue).observe(len(jobs))

    def after_settle(self, job: Job, outcome: Outcome, exc: BaseException | None) -> None:
        self.runs.labels(job.task, job.queue, OUTCOME_LABEL[outcome.kind]).inc()


def serve(port: int, host: str = "127.0.0.1") -> None:
    """Serve this process's metrics (or, in a multiprocess directory, every process's)."""
    import os

    client = prometheus()
    registry = client.REGISTRY
    if directory := os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from .metric_files import summed_registry

        registry = summed_registry(directory)
    client.start_http_server(port, addr=host, registry=registry)
