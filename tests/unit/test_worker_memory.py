"""What a busy spell freed goes back to the system once the worker is idle (glibc's
malloc_trim; nothing elsewhere), at most once per spell; and the per-job paths read the
process id without a system call, yet see a fork (tests/process/test_forks.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import deferq
from deferq.worker import Worker, WorkerConfig, memory
from deferq.worker.memory import TRIM_EVERY, Trimmer

pytestmark = pytest.mark.timeout(60)
needs_trim = pytest.mark.skipif(memory._TRIM is None, reason="no malloc_trim in this C library")


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


@needs_trim
def test_an_idle_trim_gives_back_what_a_burst_freed() -> None:
    blocks = [bytes(1000 + i % 7) for i in range(50_000)]  # ~50 MiB in the C heap
    kept = blocks[::100]  # a few survivors pin the heap's top: freeing alone gives nothing back
    del blocks
    before = rss_mib()
    assert Trimmer().idle(processed=1)
    assert rss_mib() < before - 20, "malloc_trim gave back less than 20 of ~50 freed MiB"
    assert len(kept) == 500


@needs_trim
def test_trims_once_per_busy_spell_and_not_more_often_than_its_interval() -> None:
    trimmer = Trimmer()
    assert trimmer.idle(0, now=100.0)  # at start-up: what the imports freed
    assert not trimmer.idle(0, now=100.0 + TRIM_EVERY * 5)  # nothing ran since
    assert not trimmer.idle(7, now=100.0 + TRIM_EVERY / 2)  # jobs ran, but too soon
    assert trimmer.idle(7, now=100.0 + TRIM_EVERY)
    assert not trimmer.idle(7, now=1000.0)


@needs_trim
def test_a_worker_trims_once_its_jobs_are_done(tmp_path: Path) -> None:
    app = deferq.App(f"sqlite:///{tmp_path / 'jobs.db'}")

    @app.task()
    def square(i: int) -> int:
        return i * i

    app.enqueue_many([square.call(i) for i in range(50)])
    worker = Worker(app, WorkerConfig(concurrency=4))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10 + TRIM_EVERY
        while worker.trimmer.processed != 50:  # trimmed after the 50th, once idle
            assert time.monotonic() < deadline, f"not trimmed after the jobs: {worker.trimmer.processed}"
            time.sleep(0.02)
        assert worker.processed == 50
    finally:
        worker.stop()
        thread.join(10)
        app.close()


