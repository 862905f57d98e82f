"""A stop signal that lands while the main thread holds one of the worker's event locks
(inside `Event.wait`, say) still stops the worker, and does not deadlock it."""

from __future__ import annotations

import os
import signal
import threading

import pytest

import deferq
from deferq.worker import Worker, WorkerConfig

pytestmark = pytest.mark.timeout(20)


def test_a_stop_signal_inside_an_event_wait_stops_the_worker(tmp_path) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are installed from the main thread only")
    app = deferq.App(f"sqlite:///{tmp_path}/signals.db")
    worker = Worker(app, WorkerConfig(schedules=False))
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        worker._install_signals()
        cond = worker.slot_freed._cond  # the lock a waiting main thread holds as it wakes
        with cond:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, the lock held
        assert worker.stopping.wait(10), "the stop signal was lost"
        assert worker.slot_freed.wait(10)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        app.close()
