"""Crash test with real processes: SIGKILL workers mid-run, restart them, lose nothing."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import deferq

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def start_worker(url: str, record: Path, concurrency: int = 4) -> subprocess.Popen:
    env = {**os.environ, "DEFERQ_URL": url, "DEFERQ_TEST_RECORD": str(record), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "deferq.cli", "worker", "--app", "tests.fixtures:app",
         "--url", url, "-c", str(concurrency), "--log-level", "warning"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip


def read_record(record: Path) -> tuple[Counter, Counter]:
    starts, dones = Counter(), Counter()
    if record.exists():
        for line in record.read_text().splitlines():
            kind, _, i = line.partition(" ")
            (starts if kind == "start" else dones)[int(i)] += 1
    return starts, dones


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def run_crash_scenario(url: str, tmp_path: Path, jobs: int = 1000) -> None:
    """SIGKILL each of two workers once at a random moment and restart it: every job
    completes, and only jobs the store had leased to a killed worker run again (a job
    can finish and still be unsettled when the kill lands, so "in flight" is what the
    store says, not what the job recorded). Every store runs this (test_sql_faults...)."""
    record = tmp_path / "record.log"
    app = deferq.App(url)
    app.enqueue_many([deferq.Call("record", (i, 0.003), {}) for i in range(jobs)])
    workers = [start_worker(url, record), start_worker(url, record)]
    in_flight_at_kills = 0
    try:
        for index in range(2):
            target = random.randint(jobs * (index + 1) // 4, jobs * (index + 2) // 4)
            wait_for(lambda t=target: sum(read_record(record)[1].values()) >= t, 60, f"{target} done")
            killed = workers[index]
            killed.send_signal(signal.SIGKILL)
            killed.wait(timeout=10)
            # in flight = what the store says the dead worker held: its leases
            held = app.list_jobs("active", limit=jobs)
            in_flight_at_kills += sum(1 for job in held if f":{killed.pid}:" in (job.worker or ""))
            workers[index] = start_worker(url, record)

        def all_succeeded() -> bool:
            counts = app.stats().get("default", {})
            return counts.get("succeeded", 0) == jobs

        wait_for(all_succeeded, 90, "every job to succeed")
    finally:
        for worker in workers:
            worker.kill()
            worker.wait(timeout=10)
        app.close()
    starts, dones = read_record(record)
    assert set(dones) == set(range(jobs)), "a job never completed"
    assert in_flight_at_kills > 0, "the kills landed while the workers held nothing"
    reruns = sum(starts.values()) - jobs
    assert reruns <= in_flight_at_kills, (reruns, in_flight_at_kills)


def test_sigkilled_workers_lose_nothing_sqlite(tmp_path):
    run_crash_scenario(f"sqlite:///{tmp_path}/crash.db", tmp_path)


def test_overrunning_sync_job_exits_3_and_the_job_retries(tmp_path):
    url = f"sqlite:///{tmp_path}/hang.db"
    record = tmp_path / "record.log"
    app = deferq.App(url)
    job = app.enqueue("hang", [1], max_attempts=2)  # by name: the producer sets attempts
    worker = start_worker(url, record)
    try:
        assert worker.wait(timeout=30) == 3
    finally:
        worker.kill()
    failed = app.get(job.id)
    assert failed.attempts == 1 and "timed out after 0.5s" in failed.error
    assert failed.state in ("scheduled", "queued")
    second = start_worker(url, record)
    try:
        assert second.wait(timeout=30) == 3
    finally:
        second.kill()
    dead = app.get(job.id)
    assert dead.state == "dead" and dead.attempts == 2
    app.close()


def test_bad_url_is_one_sentence_and_exit_2(tmp_path):
    for url, expect in [
        ("bogus://x", "unknown store URL"),
        (f"sqlite:////proc/nope/{tmp_path.name}/x.db", "cannot open the SQLite database"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "deferq.cli", "stats", "--url", url],
            capture_output=True, text=True, timeout=30, cwd=ROOT,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert expect in done.stderr and "Traceback" not in done.stderr
