"""Worker metrics per task and queue, as a Prometheus scrape shows them."""

from __future__ import annotations

import socket
import urllib.request

import pytest

import deferq
from deferq.worker import Worker, WorkerConfig
from deferq.worker.metrics import WorkerMetrics, serve


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("store_url", ["memory", "sqlite"], indirect=True)
def test_runs_by_outcome_times_and_in_flight_per_task(app):
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    app.add_middleware(WorkerMetrics(registry))

    @app.task(queue="mail")
    def ok() -> None:
        return None

    @app.task(max_attempts=2, backoff=deferq.backoff.fixed(0))
    def bad() -> None:
        raise RuntimeError("no")

    ok.enqueue(), ok.enqueue(), bad.enqueue()
    Worker(app, WorkerConfig(queues=("default", "mail"), burst=True, concurrency=2)).run()

    def value(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    assert value("deferq_task_runs_total", task="ok", queue="mail", outcome="succeeded") == 2
    assert value("deferq_task_runs_total", task="bad", queue="default", outcome="retried") == 1
    assert value("deferq_task_runs_total", task="bad", queue="default", outcome="dead") == 1
    assert value("deferq_task_run_seconds_count", task="ok", queue="mail") == 2
    assert value("deferq_task_wait_seconds_count", task="bad", queue="default") == 2
    assert value("deferq_tasks_in_flight", task="ok", queue="mail") == 0
    assert b"deferq_task_runs_total" in generate_latest(registry)


def test_served_over_http():
    port = free_port()
    serve(port)
    WorkerMetrics()  # the default registry, as `deferq worker --metrics-port` uses
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        assert b"deferq_tasks_in_flight" in answer.read()
