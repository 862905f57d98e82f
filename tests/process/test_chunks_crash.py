"""A chunk task's worker SIGKILLed in the middle of a call, then started again: no job is
lost, and only the jobs the killed worker held run again (those of the call it was in;
the jobs it had gathered for its next call never ran), on every store."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import deferq
from deferq.options import JobOptions
from tests.support.supervisor_harness import ROOT, TREE_PATH

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
ITEMS = 1000
HELD_ITEM = 500  # the call that holds it waits: the worker is killed then


def start_worker(url: str, record: Path, hold: str | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DEFERQ_URL": url, "DEFERQ_TEST_RECORD": str(record), "PYTHONPATH": TREE_PATH}
    env.pop("DEFERQ_TEST_HOLD", None)
    if hold:
        env["DEFERQ_TEST_HOLD"] = hold
    return subprocess.Popen(
        [sys.executable, "-m", "deferq", "worker", "--app", "tests.support.fixtures:app", "--url", url,
         "--queue", "chunks", "-c", "2", "--log-level", "warning"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def calls(record: Path) -> list[tuple[int, list[int]]]:
    """(pid, items) of every call recorded so far."""
    lines = record.read_text().splitlines() if record.exists() else []
    return [(int(pid), [int(i) for i in items.split(",")])
            for kind, pid, items in (line.split(" ", 2) for line in lines if line.startswith("call "))]


def wait_for(check, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("store", ["sqlite", "redis", "postgres", "mysql"])
def test_a_worker_killed_mid_chunk_loses_nothing_and_only_its_chunks_jobs_run_again(store, request, tmp_path):
    url = f"sqlite:///{tmp_path}/chunks.db" if store == "sqlite" else request.getfixturevalue(f"{store}_url")
    record, marker = tmp_path / "record.log", tmp_path / "go"
    app = deferq.App(url)
    on_chunks = JobOptions.parse(queue="chunks")  # by name: this App does not know the task
    jobs = app.enqueue_many([deferq.Call("record_chunk", (i,), {}, on_chunks) for i in range(ITEMS)])
    first = start_worker(url, record, f"{HELD_ITEM} {marker}")
    second = None
    try:
        wait_for(lambda: "held" in (record.read_text() if record.exists() else ""), 60, "the held call")
        first.kill()
        first.wait(timeout=10)
        held = {job.id for job in app.list_jobs("active", limit=ITEMS) if f":{first.pid}:" in (job.worker or "")}
        marker.touch()
        second = start_worker(url, record)
        wait_for(lambda: app.stats().get("chunks", {}).get("succeeded", 0) == ITEMS, 120, "every job to succeed")
    finally:
        for worker in (first, second):
            if worker is not None and worker.poll() is None:
                worker.kill()
                worker.wait(timeout=10)
        app.close()
    made = calls(record)
    runs = Counter(item for _, items in made for item in items)
    assert set(runs) == set(range(ITEMS)), "an item never reached the function"
    assert max(len(items) for _, items in made) <= 50
    killed_call = next(items for pid, items in made if pid == first.pid and HELD_ITEM in items)
    again = {item for item, count in runs.items() if count > 1}
    assert set(killed_call) <= again, "the killed call's items did not run again"
    held_items = {i for i, job in enumerate(jobs) if job.id in held}
    assert again <= held_items, f"run again, not held by the killed worker: {sorted(again - held_items)}"
    assert max(runs.values()) == 2
