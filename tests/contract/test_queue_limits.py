"""Limits on a whole queue (`app.limits.set("queue:emails", ...)`), on every store: set
while a worker runs, they hold within a second for every job of the queue, whatever its
task, beside the task's own limits; other queues are not held back."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from deferq.job import JobState
from deferq.limits.in_force import in_force
from deferq.limits.runtime import REFRESH
from tests.contract.test_rate_limits import most_in_any_window
from tests.contract.test_worker import start_worker, stop_worker, wait_for_state
from tests.support.server_helpers import wait_until


def limited_queue(app, seconds: float = 0.0):
    """Two tasks on a queue of their own, each noting its start and end; a third on another queue."""
    queue = f"emails-{uuid.uuid4().hex[:6]}"
    runs: list[tuple[str, float, float]] = []
    lock = threading.Lock()

    def body(name: str) -> None:
        started = time.time()
        time.sleep(seconds)
        with lock:
            runs.append((name, started, time.time()))

    welcome = app.task(name="ql.welcome", queue=queue)(lambda: body("welcome"))
    digest = app.task(name="ql.digest", queue=queue, concurrency=5)(lambda: body("digest"))
    other = app.task(name="ql.other", queue="default")(lambda: body("other"))
    return queue, runs, (welcome, digest, other)


def set_while_running(app, queue: str, tasks, **limit) -> tuple:
    """A worker that ran a job (so it holds its copy of the limits), then the limit set;
    the jobs enqueued a second later, when every worker holds it."""
    worker, thread = start_worker(app, queues=(queue, "default"), concurrency=6)
    wait_for_state(app, tasks[2].enqueue().id, JobState.SUCCEEDED)
    app.limits.set(f"queue:{queue}", **limit)
    time.sleep(REFRESH + 0.05)
    return worker, thread


@pytest.mark.slow  # workers held over seconds of real time: ~3 s a store
def test_a_queue_concurrency_holds_for_all_its_tasks_within_a_second(app):
    queue, runs, (welcome, digest, other) = limited_queue(app, seconds=0.15)
    worker, thread = set_while_running(app, queue, (welcome, digest, other), concurrency=2)
    try:
        jobs = [task.enqueue() for task in (welcome, digest) * 2]
        outside = [other.enqueue() for _ in range(3)]
        for job in jobs + outside:
            wait_for_state(app, job.id, JobState.SUCCEEDED, timeout=20)
    finally:
        stop_worker(worker, thread)
    mine = [(start, end) for name, start, end in runs if name != "other"]
    most = max(sum(1 for s, e in mine if s <= start < e) for start, _ in mine)
    assert len(mine) == 4 and most <= 2
    assert {app.get(job.id).attempts for job in jobs} == {1}  # waiting for a slot spends no attempt
    assert app.limits.get(f"queue:{queue}") == {"rate": None, "concurrency": 2, "paused_for": None}


@pytest.mark.slow  # workers held over seconds of real time: ~3 s a store
def test_a_queue_rate_holds_for_all_its_tasks_and_a_pause_stops_them(app):
    queue, runs, (welcome, digest, other) = limited_queue(app)
    worker, thread = set_while_running(app, queue, (welcome, digest, other), rate="10/s")
    try:
        jobs = [task.enqueue() for task in (welcome, digest) * 4]
        for job in jobs:
            wait_for_state(app, job.id, JobState.SUCCEEDED, timeout=20)
        starts = [start for name, start, _ in runs if name != "other"]
        assert len(starts) == 8 and most_in_any_window(starts, 0.5) <= 5 + 1  # turns 0.1 s apart
        app.limits.pause(f"queue:{queue}", 30)
        time.sleep(REFRESH + 0.05)
        paused = welcome.enqueue()
        free = other.enqueue()
        wait_for_state(app, free.id, JobState.SUCCEEDED)  # another queue is not held back
        wait_until(lambda: app.get(paused.id).state == JobState.SCHEDULED, what="the paused queue's job snoozed")
        assert app.limits.clear(f"queue:{queue}")
    finally:
        stop_worker(worker, thread)


def test_the_limits_in_force_name_each_kind_with_its_use(app, backend):
    """What the console's Limits page lists (limits/in_force.py): declared and set limits,
    a pause alone, and the slots held of a limit with one scope."""
    queue = f"q-{uuid.uuid4().hex[:6]}"
    app.limits.set(f"queue:{queue}", rate="10/s", concurrency=3)
    app.limits.set("customer:9", concurrency=1)
    app.limits.pause("ql.paused", 60)
    assert backend.slot_take(f"queue:{queue}", 3, "job1:1") > 0
    declared = {"ql.sync": {"rate": "5/s", "rate_key": "c:{c}", "concurrency": 2, "concurrency_key": "c:{c}",
                            "queue": queue}}
    rows = {row["name"]: row for row in in_force(backend, declared, set())}
    assert [rows[n]["kind"] for n in (f"queue:{queue}", "ql.sync", "ql.paused", "customer:9")] == [
        "queue", "task", "task", "key"]
    assert rows[f"queue:{queue}"]["running"] == 1 and rows[f"queue:{queue}"]["rate"] == "10/s"
    assert rows[f"queue:{queue}"]["recent_per_s"] == 0
    assert rows["ql.sync"]["running"] is None  # per key: no one scope to count
    assert rows["ql.paused"]["set"] is None and 55 < rows["ql.paused"]["paused_for"] <= 60
    assert rows["customer:9"] | {"paused_for": None} == {
        "name": "customer:9", "kind": "key", "queue": None, "declared": None,
        "set": {"rate": None, "concurrency": 1}, "paused_for": None, "rate": None, "concurrency": 1,
        "running": 0, "recent_per_s": None}
