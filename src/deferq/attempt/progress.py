"""Progress reports of running jobs, throttled on their way to the store.

A task may call `current_job().progress(...)` in a tight loop; the store sees the
first report of a job at once, then at most one every `INTERVAL` seconds, always the
newest. The writes happen on a thread of their own, so a task (sync or async) never
waits for the store. When a job ends, its last report is written before its outcome
is settled (`finish`), so a task that reports 1.0 and returns is seen at 1.0.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from ..job import Job

log = logging.getLogger("deferq.worker")

INTERVAL = 0.5  # seconds between two stored reports of one job


class ProgressWriter:
    """Throttles and writes progress reports. `store(jobs)` writes a batch (each job
    carrying its report); it is called on this writer's thread, never the task's."""

    def __init__(self, store: Callable[[Sequence[Job]], object], interval: float = INTERVAL) -> None:
        self.store = store
        self.interval = interval
        self.pending: dict[str, Job] = {}  # job id -> the job with its newest unwritten report
        # job id -> when its last report was written (monotonic). Whether a job reported may be
        # read without the lock (`id in pending or id in written`): a job's entries only move
        # from `pending` to `written`, in that order, once its task has returned
        self.written: dict[str, float] = {}
        self._writing: set[str] = set()  # job ids of the batch being written now
        self._then: dict[str, list[Callable[[], None]]] = {}  # job id -> run after its final write
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def report(self, job: Job, fraction: float, message: str | None) -> None:
        """A task's report (any thread): kept as the job's newest, written when allowed."""
        with self._changed:
            new = job.id not in self.pending  # else the writer already knows when it is due
            self.pending[job.id] = job.evolve(progress=fraction, progress_message=message)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="deferq-progress", daemon=True)
                self._thread.start()
            elif new:
                self._changed.notify()

    def finish(self, job_id: str, then: Callable[[], None]) -> None:
        """The job ended: write its unwritten report now, then call `then` (at once when
        nothing of it is waiting or being written)."""
        with self._changed:
            self.written.pop(job_id, None)
            if job_id in self.pending or job_id in self._writing:
                self._then.setdefault(job_id, []).append(then)
                self._changed.notify()
                return
        then()

    def _due(self, now: float) -> tuple[list[Job], float | None]:
        """Reports that may be written now, and when the next one may (with the lock held)."""
        ready, next_at = [], None
        for job_id, job in self.pending.items():
            at = self.written.get(job_id, now - self.interval) + self.interval
            if at <= now or job_id in self._then:
                ready.append(job)
            elif next_at is None or at < next_at:
                next_at = at
        return ready, next_at

    def _run(self) -> None:
        """Write reports as they come due; the thread ends when none is left (a report
        starts it again), so a worker whose tasks report nothing has none."""
        while True:
            with self._changed:
                now = time.monotonic()
                ready, next_at = self._due(now)
                while not ready:
                    if next_at is None:
                        self._thread = None
                        return
                    self._changed.wait(next_at - now)
                    now = time.monotonic()
                    ready, next_at = self._due(now)
                for job in ready:
                    if job.id not in self._then:
                        self.written[job.id] = now  # before leaving `pending`: see `written`
                    del self.pending[job.id]
                self._writing = {job.id for job in ready}
            try:
                self.store(ready)
            except Exception:  # noqa: BLE001 - progress is informative: never stop for it
                log.exception("could not store the progress of %d job(s)", len(ready))
            with self._changed:
                self._writing = set()
                then = [cb for job in ready if job.id not in self.pending for cb in self._then.pop(job.id, ())]
            for callback in then:
                callback()
