"""The upkeep leader SIGKILLed mid-job, beside a second `deferq worker`: the second takes
the lease over once it has run out (not before), and, leading now, recovers the dead
leader's job once that job's lease has run out too; the job then runs again, there.
SQLite, Redis and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import deferq
from deferq.upkeep.leader import LEASE, current_leader
from tests.support.supervisor_harness import ROOT, TREE_PATH, wait_until

APP_LEASE = 2.0  # tests/support/fixtures.py's App: the upkeep lease is the shorter of it and LEASE
UPKEEP_LEASE = min(LEASE, APP_LEASE)


def start_worker(url: str, record: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DEFERQ_URL": url, "DEFERQ_TEST_RECORD": str(record), "PYTHONPATH": TREE_PATH}
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "deferq", "worker", "--app", "tests.support.fixtures:app",
                                 "--url", url, "-c", "1"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "redis", "postgres"])
def test_a_killed_leader_is_replaced_after_its_lease_and_its_job_recovered(store, request, tmp_path):
    url = request.getfixturevalue(f"{store}_url")
    record = tmp_path / "record.log"
    app = deferq.App(url)
    first = start_worker(url, record, tmp_path / "first.log")
    second = None
    try:
        leader = wait_until(lambda: current_leader(app.backend), 30, "a leader")
        assert f":{first.pid}:" in leader
        job = app.enqueue("record", [1, 6.0])
        wait_until(lambda: "start 1" in lines(record), 30, "the job to start on the leader")
        second = start_worker(url, record, tmp_path / "second.log")
        wait_until(lambda: any(f":{second.pid}:" in name for name in app.backend.kv_list("workers")), 30,
                   "the second worker up")
        assert current_leader(app.backend) == leader  # the second only watches the lease
        first.send_signal(signal.SIGKILL)
        first.wait()
        killed = time.monotonic()
        taken = wait_until(lambda: (now := current_leader(app.backend)) not in (None, leader) and now,
                           UPKEEP_LEASE * 3 + 5, "a new leader")
        took = time.monotonic() - killed
        assert f":{second.pid}:" in taken
        # renewed at most a third of a lease before the kill: no takeover before the rest ran out
        assert UPKEEP_LEASE * 2 / 3 - 0.2 < took < UPKEEP_LEASE + UPKEEP_LEASE / 5 + 3, took
        done = wait_until(lambda: (j := app.get(job.id)).state == "succeeded" and j, 60, "the job run again")
        assert (done.attempts, done.last_worker) == (2, taken)
        assert lines(record).count("start 1") == 2 and lines(record).count("done 1") == 1
        assert "now leads upkeep" in (tmp_path / "second.log").read_text()
    finally:
        for worker in (first, second):
            if worker is not None and worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
                try:
                    worker.wait(30)
                except subprocess.TimeoutExpired:
                    worker.kill()
        app.close()
