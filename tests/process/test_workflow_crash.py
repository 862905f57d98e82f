"""Workflows under crashes (issue 14): SIGKILL worker processes at random moments of a
1,000-member chord and a 1,000-member batch; each callback runs exactly once, with the
right counts. On every store (Redis: one server, a Cluster and shards)."""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest

import deferq
from tests.process.test_crash import start_worker, wait_for
from tests.support.fixtures import record

pytestmark = pytest.mark.slow
MEMBERS = 1000


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


KILLS = 4
# A member caught by every kill (its lease lost each time, an attempt spent) still succeeds:
# what is checked is that nothing is lost, not how many attempts a kill costs. The callbacks
# get as many: on a loaded machine a live worker can miss its 2 s lease too.
MEMBER = deferq.options.JobOptions(max_attempts=KILLS + 3)


def run_workflow_crash(url: str, tmp_path: Path) -> None:
    log = tmp_path / "record.log"
    app = deferq.App(url)
    app.task(name="record")(record.fn)  # the producer knows the tasks by name, as the workers do
    handle = deferq.chord([deferq.Call("record", (i, 0.002), {}, MEMBER) for i in range(MEMBERS)],
                          deferq.Call("chord_done", (), {}, MEMBER)).enqueue(app)
    with app.batch(on_complete=deferq.Call("batch_done", (), {}, MEMBER)) as batch:
        app.enqueue_many([deferq.Call("record", (i, 0.002), {}, MEMBER) for i in range(MEMBERS)])
    workers = [start_worker(url, log), start_worker(url, log)]
    try:
        for index in range(KILLS):  # spread over the run, each at a random point
            target = random.randint(MEMBERS * index // 2, MEMBERS * (index + 1) // 2)
            wait_for(lambda t=target: sum(line.startswith("done") for line in lines(log)) >= t, 90, f"{target}")
            victim = index % 2
            workers[victim].send_signal(signal.SIGKILL)
            workers[victim].wait(timeout=10)
            workers[victim] = start_worker(url, log)
        callbacks = ("chord ", "batch ")
        wait_for(lambda: all(any(ln.startswith(c) for ln in lines(log)) for c in callbacks), 120, "the callbacks")
        wait_for(lambda: all(app.get(i).state.finished for i in handle.ids[-1:]), 30, "the chord to settle")
    finally:
        for worker in workers:
            worker.kill()
            worker.wait(timeout=10)
    found = lines(log)
    # Each callback ran with the right values; a second run only where a kill caught it
    # running (at-least-once: its lease expired and another worker ran it again).
    for callback, line in (("chord ", f"chord {MEMBERS} {MEMBERS * (MEMBERS - 1) // 2}"),
                           ("batch ", f"batch {MEMBERS} {MEMBERS} 0")):
        runs = [ln for ln in found if ln.startswith(callback)]
        assert set(runs) == {line} and len(runs) <= MEMBER.max_attempts, runs
    info = app.get_batch(batch.id)
    assert info is not None and (info.pending, info.succeeded, info.state) == (0, MEMBERS, "complete")
    assert handle.wait(timeout=5) == MEMBERS
    app.close()


def test_workflows_survive_sigkilled_workers_sqlite(tmp_path):
    run_workflow_crash(f"sqlite:///{tmp_path}/crash.db", tmp_path)


def test_workflows_survive_sigkilled_workers_postgres(postgres_url, tmp_path):
    run_workflow_crash(postgres_url, tmp_path)


def test_workflows_survive_sigkilled_workers_mysql(mysql_url, tmp_path):
    run_workflow_crash(mysql_url, tmp_path)


def test_workflows_survive_sigkilled_workers_redis(redis_url, tmp_path):
    run_workflow_crash(redis_url, tmp_path)


def test_workflows_survive_sigkilled_workers_redis_cluster(redis_cluster_url, tmp_path):
    run_workflow_crash(redis_cluster_url, tmp_path)


def test_workflows_survive_sigkilled_workers_redis_shards(redis_shards_url, tmp_path):
    run_workflow_crash(redis_shards_url, tmp_path)
