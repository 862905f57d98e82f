"""Child jobs under crashes, with real processes: the one worker (concurrency 1) that runs
the parents and all their children is SIGKILLed at random moments of the fan-out and
restarted. Each child is stored once, each parent ends with every result in order, and a
child ran twice only when a kill landed while the worker held it (running, or run and
not yet settled: at most two at a kill)."""

from __future__ import annotations

import random
import signal
from collections import Counter
from pathlib import Path

import pytest

import deferq
from deferq.job import JobState
from tests.process.test_crash import start_worker, stop_all, wait_for

pytestmark = pytest.mark.slow
PARENTS, CHILDREN, KILLS = 2, 60, 3


def runs(record: Path, kind: str) -> Counter[str]:
    lines = record.read_text().splitlines() if record.exists() else []
    return Counter(line for line in lines if line.startswith(kind))


def jobs_of(app: deferq.App, task: str) -> list[deferq.Job]:
    jobs: list[deferq.Job] = []
    cursor = None
    while True:
        page = app.find_jobs(task=task, limit=100, cursor=cursor)
        jobs += page.jobs
        if not (cursor := page.cursor):
            return jobs


def run_children_crash(url: str, tmp_path: Path) -> None:
    record = tmp_path / "record.log"
    app = deferq.App(url)
    parents = app.enqueue_many([deferq.Call("fan_out", (p * CHILDREN, CHILDREN), {}) for p in range(PARENTS)])
    worker = start_worker(url, record, 1)
    try:
        for index in range(KILLS):
            total = PARENTS * CHILDREN
            target = random.randint(1 + index * total // KILLS, (index + 1) * total // KILLS)
            wait_for(lambda t=target: sum(runs(record, "child").values()) >= t, 60, f"{target} children")
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=10)
            worker = start_worker(url, record, 1)
        for parent in parents:
            done = app.backend.wait_finished(parent.id, 150)
            assert done is not None and done.state == JobState.SUCCEEDED, done and (done.state, done.error)
        results = [app.get(parent.id).result for parent in parents]  # type: ignore[union-attr]
        children = [row for parent in parents for row in app.children(parent.id)]
        stored = jobs_of(app, "child_square")
    finally:
        stop_all([worker], app)
    assert results == [[i * i for i in range(p * CHILDREN, (p + 1) * CHILDREN)] for p in range(PARENTS)]
    assert len({row["id"] for row in children}) == PARENTS * CHILDREN
    assert sorted(job.id for job in stored) == sorted(row["id"] for row in children)  # each stored once
    again = sum(runs(record, "child").values()) - PARENTS * CHILDREN
    assert set(runs(record, "child")) == {f"child {i}" for i in range(PARENTS * CHILDREN)}
    assert 0 <= again <= KILLS * 2, again  # at a kill: the child running, and one ran but not yet settled


@pytest.mark.parametrize("store", ["sqlite", "redis", "postgres", "mysql"])
def test_children_survive_sigkill(store, request, tmp_path):
    url = f"sqlite:///{tmp_path}/children.db" if store == "sqlite" else request.getfixturevalue(f"{store}_url")
    run_children_crash(url, tmp_path)
