"""Chains, groups and chords (issue 14) with a real worker, on every store (Redis: one
server, a Cluster and shards)."""

from __future__ import annotations

import threading

import pytest

import deferq
from deferq.job import JobState
from deferq.worker import Worker, WorkerConfig

pytestmark = pytest.mark.parametrize(
    "store_url", ["memory", "sqlite", "postgres", "mysql", "redis", "redis_cluster", "redis_shards"], indirect=True
)


@pytest.fixture
def tasks(app):
    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    @app.task
    def double(x: int) -> int:
        return 2 * x

    @app.task
    def total(values: list[int], bonus: int = 0) -> int:
        return sum(values) + bonus

    @app.task(max_attempts=1)
    def explode(x: int) -> int:
        raise ValueError(f"boom {x}")

    return add, double, total, explode


@pytest.fixture
def worker(app):
    worker = Worker(app, WorkerConfig(queues=("default",), concurrency=4, idle_wait=0.05))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    yield worker
    worker.stop()
    thread.join(timeout=10)


def test_chain_group_chord(app, tasks, worker):
    add, double, total, _ = tasks
    flow = deferq.chain(add.call(1, 2), double.call(), double.call())
    assert flow.enqueue().wait(timeout=20) == 12
    assert deferq.group(add.call(i, i) for i in range(5)).enqueue().wait(timeout=20) == [0, 2, 4, 6, 8]
    handle = deferq.chord([double.call(i) for i in range(10)], total.call(bonus=1)).enqueue()
    assert handle.wait(timeout=20) == 91 and handle.state == JobState.SUCCEEDED
    assert deferq.chain(add.call(1, 1), add.call(5, 5), pass_result=False).enqueue().wait(timeout=20) == 10


def test_a_failed_step_cancels_the_rest_and_wait_names_it(app, tasks, worker):
    add, double, total, explode = tasks
    handle = deferq.chain(add.call(1, 2), explode.call(), double.call(), double.call()).enqueue()
    with pytest.raises(deferq.JobFailed, match="boom 3"):
        handle.wait(timeout=20)
    *_, third, fourth = [app.get(i) for i in handle.ids]
    assert third.state == fourth.state == JobState.CANCELLED and handle.ids[1] in third.error


def test_a_workflow_is_all_or_nothing(app, tasks):
    add, *_ = tasks
    bad = add.options(after=["01NOSUCHJOB0000000000000000"]).call(1, 2)
    with pytest.raises(deferq.ConfigError):
        deferq.chain(add.call(1, 2), bad).enqueue()
    assert sum(q["queued"] + q["blocked"] for q in app.stats().values()) == 0


def test_cancel_a_workflow(app, tasks):
    add, double, *_ = tasks
    handle = deferq.chain(add.call(1, 2), double.call()).enqueue()
    assert handle.state == JobState.BLOCKED  # its last step waits for the first
    assert handle.cancel() >= 1
    assert all(app.get(i).state == JobState.CANCELLED for i in handle.ids)


def test_a_batch_runs_each_callback_once_with_its_counts(app, tasks, worker):
    add, _, _, explode = tasks
    seen = []

    @app.task
    def report(batch: dict) -> None:
        seen.append(("complete", batch))

    @app.task
    def celebrate(batch: dict) -> None:
        seen.append(("success", batch))

    with app.batch(on_complete=report.call(), on_success=celebrate.call()) as b:
        for i in range(8):
            add.enqueue(i, i)
        b.enqueue(explode.call(1))
    info = app.get_batch(b.id)
    assert info is not None and info.total == 9
    done = app.get(info.callbacks["on_complete"])
    assert deferq.App.wait(app, done.id, timeout=20) is None
    assert seen == [("complete", {"id": b.id, "total": 9, "succeeded": 8, "dead": 1, "cancelled": 0})]
    skipped = app.get(info.callbacks["on_success"])
    assert skipped.state == JobState.CANCELLED
    final = app.get_batch(b.id)
    assert (final.pending, final.succeeded, final.dead, final.state) == (0, 8, 1, "complete")

    with app.batch(on_success=celebrate.call()) as ok:
        add.enqueue(1, 1)
    app.wait(app.get_batch(ok.id).callbacks["on_success"], timeout=20)
    assert seen[-1] == ("success", {"id": ok.id, "total": 1, "succeeded": 1, "dead": 0, "cancelled": 0})


def test_a_step_whose_unique_key_is_held_refuses_the_workflow(app, tasks):
    """Every store: a chain whose first step takes a key an unfinished job holds is
    refused whole, naming the key and the holder; nothing of it is stored. A chain of
    that one step is deduplicated as a plain enqueue is."""
    add, double, *_ = tasks
    holder = add.options(key="k1").enqueue(1, 1)
    with pytest.raises(deferq.ConfigError, match=f"unique key 'k1', which job {holder.id}"):
        deferq.chain(add.options(key="k1").call(2, 2), double.call()).enqueue()
    assert sum(q["queued"] + q["blocked"] for q in app.stats().values()) == 1  # nothing stored
    assert deferq.chain(add.options(key="k1").call(4, 4)).enqueue().id == holder.id  # alone: as enqueue
    other = add.options(key="k1", queue="other").call(5, 5)
    if app.backend.keys_per_queue:  # Redis: a key is unique within its queue
        deferq.chain(other, double.call()).enqueue()
    else:
        with pytest.raises(deferq.ConfigError, match="unique key 'k1'"):
            deferq.chain(other, double.call()).enqueue()
