"""`deferq worker --processes N`: one command, N worker processes, the App loaded once.

The first process loads the App, its tasks and the store's client and backend, closes
its store connections and forks the N-1 others before any thread starts: each child begins with
the first one's memory shared with it (copy-on-write; `gc.freeze()` first, so that the
collector does not write to, and so copy, the pages of what was loaded) instead of
loading it all again, as saq's --workers, Celery's prefork pool or gunicorn's workers
do. Every process is a whole worker (its own name, connections, threads and
--concurrency slots); the first one runs jobs too, and looks after the others:

- a child that exits with an error or is killed is replaced by a fresh interpreter
  (which loads the tasks' code as it is now: it is never forked from a process that
  runs threads and holds connections), after a pause that doubles, up to MAX_PAUSE,
  while its replacements die within YOUNG seconds of their start;
- a child that exits 0 by itself (--burst found nothing due, --max-jobs, an order to
  stop) is not replaced;
- once the first process stops (SIGTERM, SIGINT, --burst), it stops its children (each
  finishes its running jobs within --grace) and waits for them; its exit code is its
  own, or, when that is 0, the first failure of a child's as they stopped;
- a child whose first process is gone (killed with SIGKILL) stops by itself;
- a sync job that overran restarts its process in place as a single worker does
  (cli/restart.py); the first process hands its children over to its next image.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

from .worker import EXIT_OK

if TYPE_CHECKING:
    from ..app import App
    from .worker import Worker

log = logging.getLogger("deferq.worker")
PARENT_ENV = "DEFERQ_WORKER_PARENT"  # a replacement child's: the pid of the first process
WATCH_EVERY = 0.2  # seconds between two looks at the children
YOUNG = 5.0  # seconds: a child that dies sooner doubles the pause before its replacement
MAX_PAUSE = 30.0  # seconds: the longest pause before a replacement
STOP_MARGIN = 10.0  # seconds past --grace a stopped child gets before SIGKILL


def take_parent() -> int:
    """The first process's pid when this process is a replacement child, else 0 (read
    and removed: a process that this one's jobs start is nobody's child)."""
    raw = os.environ.pop(PARENT_ENV, "")
    return int(raw) if raw.isdigit() else 0


@dataclasses.dataclass
class Child:
    pid: int
    started: float = dataclasses.field(default_factory=time.monotonic)

    def exit_code(self) -> int | None:
        """None while it runs; its exit code (-N: killed by signal N) once it ended."""
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: its code is lost
            return 1
        return None if pid == 0 else os.waitstatus_to_exitcode(status)


class Family:
    """The first process's children: replaced when they fail, stopped with it."""

    def __init__(self, children: list[Child]) -> None:
        self.children = children
        self.pause = 1.0  # seconds before the next replacement
        self.due: list[float] = []  # when each replacement owed is to start
        self.failure = EXIT_OK  # the first failure of a child's once told to stop

    @classmethod
    def start(cls, app: App, count: int, adopted: tuple[int, ...] | None) -> tuple[Family | None, int]:
        """In the first process: its family (the children it forks now, or those its
        image before an overrun restart `adopted`) and 0. In a forked child: None and
        the first process's pid."""
        if adopted is not None:
            kept = cls([Child(pid) for pid in adopted])
            kept.due = [time.monotonic()] * (count - len(adopted))  # those it had yet to replace
            return kept, 0
        forked = cls.fork(app, count)
        return forked, 0 if forked is not None else os.getppid()

    @classmethod
    def fork(cls, app: App, count: int) -> Family | None:
        """Fork `count` children. In the first process: its family; in a child: None."""
        # The store's client and backend modules, which load when the store first opens,
        # load now, so that the children share them too (PostgreSQL: 2.8 MiB fewer
        # resident library pages per child; docs/benchmarks.md). Opening connects nothing.
        app.backend  # noqa: B018
        app.close()  # no socket, pool or thread is shared: each process opens its own
        gc.collect()
        gc.freeze()
        children = []
        for _ in range(count):
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                return None
            children.append(Child(pid))
        return cls(children)

    def pids(self) -> tuple[int, ...]:
        return tuple(child.pid for child in self.children)

    def watch(self, worker: Worker) -> None:
        """Replace failed children until `worker` stops (a thread of its own)."""

        def loop() -> None:
            while not worker.stopping.wait(WATCH_EVERY):
                self.look()

        threading.Thread(target=loop, name="deferq-children", daemon=True).start()

    def look(self) -> None:
        now = time.monotonic()
        for child in list(self.children):
            code = child.exit_code()
            if code is None:
                continue
            self.children.remove(child)
            if code == EXIT_OK:
                log.info("worker process %d ended (exit code 0): not replaced", child.pid)
                continue
            young = now - child.started < YOUNG
            wait = self.pause if young else 1.0
            self.pause = min(wait * 2, MAX_PAUSE) if young else 1.0
            log.warning("worker process %d ended with exit code %d: starting another in %.0f s",
                        child.pid, code, wait)
            self.due.append(now + wait)
        for when in [when for when in self.due if when <= now]:
            self.due.remove(when)
            self.children.append(self.spawn())

    def spawn(self) -> Child:
        """A replacement: the same command line in a fresh interpreter, told whose child it is."""
        env = {**os.environ, PARENT_ENV: str(os.getpid())}
        pid = os.posix_spawn(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
        log.info("worker process %d started", pid)
        return Child(pid)

    def stop(self, grace: float, own_code: int, burst: bool) -> int:
        """After the first process's worker stopped: stop the children (--burst: let
        them end by themselves) and wait for them. The command's exit code."""
        self.due.clear()
        if not burst:
            for child in self.children:
                _signal(child.pid, signal.SIGTERM)
        deadline = None if burst else time.monotonic() + grace + STOP_MARGIN
        while self.children and (deadline is None or time.monotonic() < deadline):
            for child in list(self.children):
                code = child.exit_code()
                if code is not None:
                    self.children.remove(child)
                    if code not in (EXIT_OK, -signal.SIGTERM):  # SIGTERM: one still starting
                        self.failure = self.failure or (code if code > 0 else 1)
            time.sleep(WATCH_EVERY / 4)
        for child in self.children:
            log.warning("worker process %d still ran %.0f s after it was told to stop: killed",
                        child.pid, grace + STOP_MARGIN)
            _signal(child.pid, signal.SIGKILL)
            os.waitpid(child.pid, 0)
            self.failure = self.failure or 1
        return own_code or self.failure


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
