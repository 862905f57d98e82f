"""`deferq run` with metrics_port: every child counts its jobs, the master serves the sum."""

from __future__ import annotations

import os
import signal
import socket
import urllib.request

import orjson
import pytest

import deferq
from tests.support.supervisor_harness import Master, job_states, wait_until

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pool(port: int) -> str:
    return f"""
metrics_port = {port}
check_every = "0.2s"
grace = "1s"
[pools.main]
queues = ["default"]
processes = 2
concurrency = 2
"""


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, from the master's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(port: int, name: str, **labels: str) -> float:
    return scrape(port).get((name, tuple(sorted(labels.items()))), 0.0)


def heartbeats(store: deferq.App) -> list[dict]:
    return [orjson.loads(raw) for raw in store.backend.kv_list("workers").values()]


@pytest.fixture
def running(tmp_path):
    url = f"sqlite:///{tmp_path}/deferq.db"
    port = free_port()
    master = Master(tmp_path, url, pool(port)).start()
    store = deferq.App(url)
    try:
        wait_until(lambda: len(heartbeats(store)) == 2, 30, "two children beating")
        yield master, store, port
    finally:
        store.close()
        master.kill()


def test_one_scrape_shows_the_runs_of_every_child_summed(running):
    master, store, port = running
    store.enqueue_many([deferq.Call("nap", (0.2,), {}) for _ in range(12)])
    wait_until(lambda: job_states(store).get("succeeded") == 12, 60, "12 naps done")
    done = wait_until(lambda: {b["name"]: b["processed"] for b in heartbeats(store)} if sum(
        b["processed"] for b in heartbeats(store)) == 12 else None, 10, "heartbeats counting 12 jobs")
    assert len(done) == 2 and all(done.values()), f"one child ran every job: {done}"
    labels = {"task": "nap", "queue": "default", "outcome": "succeeded"}
    wait_until(lambda: value(port, "deferq_task_runs_total", **labels) == 12, 10, "12 runs in the sum")
    assert value(port, "deferq_task_run_seconds_count", task="nap", queue="default") == 12
    assert "worker metrics of every child, summed" in master.log()
    assert master.stop() == 0


def test_a_dead_child_leaves_the_in_flight_gauge(running):
    master, store, port = running
    job = store.enqueue("nap", [30.0])
    wait_until(lambda: value(port, "deferq_tasks_in_flight", task="nap", queue="default") == 1, 30,
               "the nap in flight")
    runner = wait_until(lambda: next((b for b in heartbeats(store) if b.get("running")), None), 10,
                        "a heartbeat naming the child that runs the nap")
    os.kill(runner["pid"], signal.SIGKILL)
    master.wait_log(f"(pid {runner['pid']}) died")
    # the job comes back after its lease and runs again in another child: one in flight,
    # not two (the killed child's gauge left the sum when the master marked it dead)
    wait_until(lambda: store.get(job.id).attempts == 2 and any(b.get("running") for b in heartbeats(store)),
               30, "the nap running again in another child")
    assert value(port, "deferq_tasks_in_flight", task="nap", queue="default") == 1
    assert master.stop() == 0
