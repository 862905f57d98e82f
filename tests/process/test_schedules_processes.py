"""Two plain `deferq worker` processes and no master fire a 2-second schedule for 40 seconds:
each tick once, none missed, and still so after the leader is SIGKILLed (the other takes
over within one lease and fires the ticks of the gap late, each once). SQLite, Redis and
PostgreSQL side by side."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import deferq
from deferq.schedules.definition import PeriodicJob
from deferq.schedules.firing import GRACE
from deferq.upkeep.leader import LEASE, current_leader
from tests.support.supervisor_harness import FIXTURES, ROOT, TREE_PATH, all_jobs, store_url, wait_until

EVERY = 2.0
RUN = 40.0  # seconds of ticks; the leader is killed a third of the way in, the other leads past a lease


KINDS = ("sqlite", "redis", "postgres")


class _Kind:
    """What store_url reads of a request: the kind of store, and the fixtures."""

    def __init__(self, request: pytest.FixtureRequest, kind: str) -> None:
        self.param, self.getfixturevalue = kind, request.getfixturevalue


@pytest.fixture
def urls(request, tmp_path):
    stores = [store_url(_Kind(request, kind), tmp_path) for kind in KINDS]
    yield {kind: next(store) for kind, store in zip(KINDS, stores, strict=True)}
    for store in stores:
        next(store, None)  # its clean-up


def start_worker(url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": TREE_PATH}
    env.pop("DEFERQ_URL", None)
    with open(log, "ab") as out:
        command = [sys.executable, "-m", "deferq", "worker", "--app", FIXTURES, "--url", url, "-q", "ticks"]
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


@pytest.mark.slow
def test_two_workers_fire_each_tick_once_across_a_killed_leader(tmp_path, urls):
    with ThreadPoolExecutor(len(urls)) as pool:
        runs = {kind: pool.submit(two_workers_across_a_killed_leader, tmp_path / kind, url)
                for kind, url in urls.items()}
    for kind, run in runs.items():
        try:
            run.result()
        except AssertionError as failed:
            raise AssertionError(f"{kind}: {failed}") from None


def two_workers_across_a_killed_leader(tmp_path: Path, url: str) -> None:
    tmp_path.mkdir()
    store = deferq.App(url)
    pulse = PeriodicJob("pulse", None, "tick", every=EVERY, options={"queue": "ticks"})
    store.schedules.put(pulse, "api")
    workers = [start_worker(url, tmp_path / f"worker{n}.log") for n in range(2)]
    try:
        ticked = lambda: [j for j in all_jobs(store) if (j.key or "").startswith("schedule:pulse:")]  # noqa: E731
        wait_until(lambda: len(ticked()) >= 2, 30, "the first ticks")
        leader = wait_until(lambda: current_leader(store.backend), 5, "a leader")
        killed = next(w for w in workers if w.pid == int(leader.split(":")[-2]))
        wait_until(lambda: len(ticked()) >= RUN / EVERY / 3, 30, "a third of the ticks")
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        wait_until(lambda: (current_leader(store.backend) or leader) != leader, LEASE * 2, "a new leader")
        first = min(float(j.key.rsplit(":", 1)[1]) for j in ticked())
        wait_until(lambda: max(float(j.key.rsplit(":", 1)[1]) for j in ticked()) >= first + RUN, RUN * 2,
                   "the rest of the ticks", every=0.5)
        jobs = ticked()
        per_tick = Counter(float(j.key.rsplit(":", 1)[1]) for j in jobs)
        assert set(per_tick.values()) == {1}, per_tick  # never twice
        ticks = sorted(per_tick)
        assert ticks == [ticks[0] + EVERY * n for n in range(len(ticks))]  # none missed
        late = max(j.created_at - float(j.key.rsplit(":", 1)[1]) for j in jobs)
        assert late <= LEASE + LEASE / 5 + EVERY + 1 < GRACE  # the gap: at most one lease and a poll
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
        store.close()
