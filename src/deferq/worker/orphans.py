"""A worker process whose parent is gone stops by itself (a `deferq run` child, or a
child of `deferq worker --processes`, whose parent was killed with SIGKILL and so could
not stop it)."""

from __future__ import annotations

import os
import threading

from .worker import Worker

ORPHAN_CHECK_EVERY = 1.0  # seconds between checks that the parent is still alive


def stop_when_orphaned(worker: Worker, parent_pid: int) -> None:
    """Stop `worker` once this process's parent is no longer `parent_pid`."""

    def watch() -> None:
        while not worker.stopping.wait(ORPHAN_CHECK_EVERY):
            if os.getppid() != parent_pid:
                worker.stop()
                return

    threading.Thread(target=watch, name="deferq-orphan-watch", daemon=True).start()
