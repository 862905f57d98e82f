"""A worker never holds more leases of jobs that started than its slots plus its
prefetch (what a crash can make run twice), nor more leases than that plus the jobs it
leases ahead, however far its settling falls behind (here: beside processes that take
every core)."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from deferq.job import JobState
from deferq.worker import Worker, WorkerConfig


def burn(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@pytest.mark.parametrize("store_url", ["sqlite", "postgres"], indirect=True)
def test_leases_held_never_exceed_slots_plus_prefetch_beside_a_cpu_hog(app):
    @app.task()
    def noop(i: int) -> int:
        return i

    app.enqueue_many([noop.call(i) for i in range(3000)])
    config = WorkerConfig(concurrency=4, prefetch=4, burst=True)
    worker = Worker(app, config)
    most_held = most_active = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal most_held, most_active
        while not done.is_set():
            with worker.lock:  # running, ended (awaiting their settle), not those leased ahead
                most_held = max(most_held, len(worker.running) - len(worker.held))
            active = app.backend.list_jobs(JobState.ACTIVE, None, 1000)
            most_active = max(most_active, sum(1 for j in active if j.worker == config.name))
            time.sleep(0.005)

    hogs = [multiprocessing.Process(target=burn, args=(20.0,)) for _ in range(3)]
    for hog in hogs:
        hog.start()
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        assert worker.run() == 0
    finally:
        done.set()
        watcher.join(10)
        for hog in hogs:
            hog.terminate()
    assert app.stats()["default"]["succeeded"] == 3000
    assert most_held <= 8 and most_active <= 8 + 4, (most_held, most_active)
