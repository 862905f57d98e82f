"""Worker metrics per task and queue, as a Prometheus scrape shows them."""

from __future__ import annotations

import os
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


@pytest.mark.parametrize("store_url", ["memory", "sqlite"], indirect=True)
def test_a_chunk_tasks_items_are_counted_as_jobs_and_its_calls_apart(app):
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    app.add_middleware(WorkerMetrics(registry))

    @app.task(queue="index", chunk=deferq.Chunk(size=10, wait=0.05))
    def index(ids: list[int]) -> None:
        return None

    app.enqueue_many([index.call(i) for i in range(25)])
    Worker(app, WorkerConfig(queues=("index",), burst=True, concurrency=1)).run()

    def value(name: str) -> float:
        return registry.get_sample_value(name, {"task": "index", "queue": "index"}) or 0.0

    assert registry.get_sample_value("deferq_task_runs_total", {
        "task": "index", "queue": "index", "outcome": "succeeded"}) == 25
    assert value("deferq_chunk_call_items_sum") == 25
    assert value("deferq_chunk_calls_total") == value("deferq_chunk_call_items_count") >= 3
    assert value("deferq_tasks_in_flight") == 0


def test_served_over_http():
    port = free_port()
    serve(port)
    WorkerMetrics()  # the default registry, as `deferq worker --metrics-port` uses
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        assert b"deferq_tasks_in_flight" in answer.read()


def test_a_scrape_while_a_process_creates_its_file_sums_the_others(tmp_path):
    """The master of `deferq run` sums its children's files; a child that starts in the
    instant of a scrape has its file open and still empty: the scrape leaves it out
    (prometheus-client's own collector fails the whole scrape on it)."""
    import subprocess
    import sys

    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    from deferq.worker.metric_files import summed_registry

    counting = ("from prometheus_client import Counter\n"
                "Counter('deferq_test_runs', 'runs', ['task']).labels('nap').inc(3)\n")
    subprocess.run([sys.executable, "-c", counting], check=True, timeout=60,
                   env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)})
    (tmp_path / "counter_999999.db").touch()  # a child starting: opened, not yet sized

    text = generate_latest(summed_registry(str(tmp_path))).decode()
    assert 'deferq_test_runs_total{task="nap"} 3.0' in text

    plain = CollectorRegistry()
    MultiProcessCollector(plain, str(tmp_path))
    with pytest.raises(Exception, match="buffer"):  # the failure this collector avoids
        generate_latest(plain)
