"""SQLite opens one connection per thread: a thread that ends must not keep one open (a
worker's progress writer ends when idle and starts again at the next report; before,
each start leaked a connection and two descriptors, ~2 a second under progress reports)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import deferq


def open_on(path: Path) -> int:
    """Descriptors of this process open on the database file itself."""
    fds = Path(f"/proc/{os.getpid()}/fd")
    return sum(1 for fd in fds.iterdir() if _target(fd) == str(path))


def _target(fd: Path) -> str | None:
    try:
        return os.readlink(fd)
    except OSError:
        return None


def test_threads_that_end_leave_no_connection_open(tmp_path):
    path = tmp_path / "deferq.db"
    app = deferq.App(f"sqlite:///{path}")
    try:
        app.enqueue("t", [0])
        for _ in range(30):  # one short-lived thread after another, as the progress writer
            thread = threading.Thread(target=app.backend.stats)
            thread.start()
            thread.join()
        # the live threads' (this one, the history recorder's) and the last ended one's, until
        # the next thread opens its own
        assert open_on(path) <= 3
        assert app.get(app.enqueue("t", [1]).id) is not None
    finally:
        app.close()
    assert open_on(path) == 0
