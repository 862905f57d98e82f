"""Per-minute history of every queue and task, kept in the store (the console's charts).

What is kept, per (minute, queue, task): counters (`COUNTS`) and two latency histograms,
the wait (from a job's due time to its lease) and the run (the task function's time).
A histogram has fixed logarithmic buckets (`bucket_of`), the same in every process, so
the histograms of many workers, and of many minutes, merge by adding counts and a
percentile of the merge is as good as one of a single process (within one bucket:
`Histogram.percentile`).

Nothing is written per job. A process adds to a `HistoryBuffer` in memory (a lock and a
dict update) and a `HistoryRecorder` thread writes what was added with one store call
(`history_add`) every `DEFERQ_HISTORY_SECONDS` (5 s). The App's `History` middleware
feeds it: every enqueue (App.enqueue*, workflows, POST /v1/jobs) counts what it stored
anew, a worker what it settles; a store counts what it ends by
itself (an expired job, an expired lease: backends/history.py). A store keeps a counter per
(minute, queue, task, field) and adds to it, so writers never read-modify-write and
never conflict. Rows older than the retention (`DEFERQ_HISTORY_DAYS`, 7) are deleted by
the recorders (`history_prune`), or expire (Redis).

A process that dies loses at most its last few seconds of counts; one that exits
normally writes them at exit.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import threading
import time
import weakref
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .. import forks
from ..backends.history import MAX_MINUTES as MAX_MINUTES  # GET /v1/stats/history's longest window
from ..backends.history import history_guard, minute_of, retention_minutes
from ..middleware import Middleware, Settled

if TYPE_CHECKING:
    from ..backends.base import Backend, Enqueue, Outcome
    from ..job import Job

log = logging.getLogger("deferq.history")

COUNTS = ("enqueued", "succeeded", "retried", "failed", "dead", "cancelled", "expired")
WAIT, RUN = "w", "r"  # field prefixes of the two histograms: "w12" = wait bucket 12
PERCENTILES = (50, 90, 99)
# Buckets: 0 holds everything under FIRST; bucket i >= 1 holds [FIRST * GROWTH**(i-1),
# FIRST * GROWTH**i); the last one everything above. Growth sqrt(2): a percentile is off
# by at most 19% (its bucket's geometric middle), over 1 ms .. 8 days in 60 buckets.
FIRST = 0.001
GROWTH = math.sqrt(2)
BUCKETS = 60
SECONDS = float(os.environ.get("DEFERQ_HISTORY_SECONDS", 5.0))
PRUNE_EVERY = 600.0  # seconds between one recorder's prunes
MAX_PENDING = 50_000  # (minute, queue, task) cells held while the store is down, at most

Row = tuple[int, str, str, str, int]  # (minute, queue, task, field, amount)


# -- the histogram ---------------------------------------------------------------------------


# The buckets' lower bounds from bucket 1 on, as bucket_bounds gives them: a bucket is one
# C call (a bisection), with no rounding of a logarithm at a bound.
_LOWS = tuple(FIRST * GROWTH ** (index - 1) for index in range(1, BUCKETS))


def bucket_of(seconds: float) -> int:
    if not seconds >= FIRST:  # also NaN
        return 0
    return bisect_right(_LOWS, seconds)


def bucket_bounds(index: int) -> tuple[float, float]:
    """[low, high) of a bucket, in seconds (the last one is open: high is inf)."""
    if index <= 0:
        return 0.0, FIRST
    high = FIRST * GROWTH**index if index < BUCKETS - 1 else math.inf
    return FIRST * GROWTH ** (index - 1), high


def bucket_value(index: int) -> float:
    """What a bucket stands for in a percentile: its geometric middle."""
    low, high = bucket_bounds(index)
    if index <= 0:
        return FIRST / 2
    if math.isinf(high):
        return low
    return math.sqrt(low * high)


class Histogram(dict[int, int]):
    """{bucket: count}. Histograms merge by adding counts (`merge`)."""

    def add(self, seconds: float, count: int = 1) -> None:
        index = bucket_of(seconds)
        self[index] = self.get(index, 0) + count

    def merge(self, other: dict[int, int]) -> Histogram:
        for index, count in other.items():
            self[index] = self.get(index, 0) + count
        return self

    @property
    def count(self) -> int:
        return sum(self.values())

    def percentile(self, p: float) -> float | None:
        """The p-th percentile (nearest rank) as its bucket's middle; None when empty. The
        true nearest-rank value of the samples lies in the same bucket."""
        total = self.count
        if total <= 0:
            return None
        rank = max(1, math.ceil(p / 100 * total))
        seen = 0
        for index in sorted(self):
            seen += self[index]
            if seen >= rank:
                return bucket_value(index)
        return bucket_value(max(self))  # pragma: no cover - rank <= total


# -- collecting in a process -----------------------------------------------------------------


class HistoryBuffer:
    """Counts not yet written: {(minute, queue, task): {field: amount}}. Thread-safe."""

    def __init__(self) -> None:
        self.cells: dict[tuple[int, str, str], dict[str, int]] = {}
        self.lock = threading.Lock()

    def add(self, minute: int, queue: str, task: str, field: str, amount: int = 1) -> None:
        with self.lock:
            cell = self.cells.get((minute, queue, task))
            if cell is None:
                cell = self.cells[(minute, queue, task)] = {}
            cell[field] = cell.get(field, 0) + amount

    def add_many(self, entries: Iterable[tuple[int, str, str, str, int]]) -> None:
        with self.lock:
            for minute, queue, task, field, amount in entries:
                cell = self.cells.get((minute, queue, task))
                if cell is None:
                    cell = self.cells[(minute, queue, task)] = {}
                cell[field] = cell.get(field, 0) + amount

    def drain(self) -> list[Row]:
        """Every count, as rows, emptying the buffer."""
        with self.lock:
            cells, self.cells = self.cells, {}
        return [(m, q, t, f, n) for (m, q, t), fields in sorted(cells.items()) for f, n in sorted(fields.items())]

    def give_back(self, rows: Sequence[Row]) -> None:
        """Rows a write failed to store: counted again, unless too much is held already."""
        if len(self.cells) < MAX_PENDING:
            self.add_many(rows)

    def __bool__(self) -> bool:
        return bool(self.cells)


class HistoryRecorder:
    """One process's buffer and the thread that writes it every `every` seconds."""

    def __init__(self, backend: Backend, every: float = SECONDS) -> None:
        self.backend = backend
        self.every = every
        self.buffer = HistoryBuffer()
        self._pid = forks.pid
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._pruned = time.monotonic() - PRUNE_EVERY + 30  # the first prune ~30 s after start
        self._closed = False
        # said once when writes start failing (a store or shard down) and once when they work again
        self._guard = history_guard(backend)
        _RECORDERS.add(self)

    # -- what processes count -----------------------------------------------------------------

    def enqueued(self, items: Sequence[Enqueue], jobs: Sequence[Job]) -> None:
        """Count the jobs `enqueue_many` stored anew (not those a unique key turned away)."""
        minute = int(time.time() // 60)  # minute_of, inline: once per enqueue
        is_new = self.backend.is_new
        if len(jobs) == 1:  # task.enqueue(): the commonest call
            if is_new(items[0], job := jobs[0]):
                self.buffer.add(minute, job.queue, job.task, "enqueued")
                self._started()
            return
        # one entry per (queue, task), not per job: a batch is mostly one task
        counted = Counter([(job.queue, job.task) for item, job in zip(items, jobs, strict=True)
                           if is_new(item, job)])
        entries = [(minute, queue, task, "enqueued", n) for (queue, task), n in counted.items()]
        if entries:
            self.buffer.add_many(entries)
            self._started()

    def settled(self, settled: Iterable[tuple[Outcome, float]], lease: float) -> None:
        """Count settled attempts, each with the seconds it ran: its outcome, how long it
        waited and ran. The wait is on the store's clock: from its due time to its lease
        (`lease_until - lease`). One clock read and one lock per call; the cell is looked
        up again only when the queue or task changes, the run's bucket only when the
        seconds do (a chunk call's jobs share both)."""
        minute = int(time.time() // 60)  # minute_of, inline: once per settled batch
        buffer = self.buffer
        queue = task = ran_was = None
        cell: dict[str, int] = {}
        run_field = ""
        with buffer.lock:
            cells = buffer.cells
            for outcome, ran in settled:
                job = outcome.job
                if job.queue != queue or job.task != task:
                    queue, task = job.queue, job.task
                    cell = cells.get((minute, queue, task)) or cells.setdefault((minute, queue, task), {})
                field = OUTCOME_FIELD.get(outcome.kind)
                if field is not None:
                    cell[field] = cell.get(field, 0) + 1
                    if outcome.error is not None and field in _FAILED:
                        cell["failed"] = cell.get("failed", 0) + 1
                if job.lease_until is not None:
                    wait = job.lease_until - lease - job.run_at
                    wait_field = _WAIT_FIELDS[bisect_right(_LOWS, wait) if wait >= FIRST else 0]
                    cell[wait_field] = cell.get(wait_field, 0) + 1
                if ran != ran_was:
                    ran_was, run_field = ran, _RUN_FIELDS[bucket_of(ran)]
                cell[run_field] = cell.get(run_field, 0) + 1
        self._started()

    def count(self, queue: str, task: str, field: str, amount: int = 1) -> None:
        """Count something else that happened (a cancel from the API, say)."""
        self.buffer.add(minute_of(time.time()), queue, task, field, amount)
        self._started()

    # -- writing ------------------------------------------------------------------------------

    def _started(self) -> None:
        if self._thread is not None and self._pid == forks.pid:
            return
        with self._start_lock:
            if self._pid != forks.pid:  # forked: the parent's thread is not ours, nor its counts
                self._pid, self._thread, self.buffer = forks.pid, None, HistoryBuffer()
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._loop, name="deferq-history", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while not self._closed:
            self._wake.wait(self.every)
            self._wake.clear()
            self.write()

    def write(self) -> None:
        """`flush`, never raising: a failure is said once per outage (history_guard) and
        the counts are kept for the next try (a worker's last write, at its stop)."""
        try:
            self.flush()
        except Exception as exc:  # noqa: BLE001 - history must never stop anything
            self._guard.failed(exc)
        else:
            self._guard.succeeded()

    def flush(self) -> int:
        """Write what was counted (one store call); prune now and then. Rows written."""
        with self._write_lock:
            rows = self.buffer.drain()
            if rows:
                try:
                    self.backend.history_add(rows, retention_minutes())
                except BaseException:
                    self.buffer.give_back(rows)
                    raise
            if time.monotonic() - self._pruned >= PRUNE_EVERY:
                self._pruned = time.monotonic()
                self.backend.history_prune(minute_of(time.time()) - retention_minutes())
            return len(rows)

    def close(self) -> None:
        """Write what is left and stop the thread."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        if self._pid == forks.pid and self.buffer:
            try:
                self.flush()
            except Exception as exc:  # noqa: BLE001 - at exit: lose the last seconds, said once
                if self._guard.up:  # else the outage was said already
                    log.warning("history not written at exit: %s", exc)


OUTCOME_FIELD = {"succeeded": "succeeded", "retry": "retried", "dead": "dead", "cancelled": "cancelled"}
_WAIT_FIELDS = tuple(f"{WAIT}{i}" for i in range(BUCKETS))  # "w12": no string built per job
_RUN_FIELDS = tuple(f"{RUN}{i}" for i in range(BUCKETS))
_FAILED = frozenset(("retried", "dead"))  # an attempt that ends so with an error also counts as failed
_RECORDERS: weakref.WeakSet[HistoryRecorder] = weakref.WeakSet()


@atexit.register
def _flush_all() -> None:
    for recorder in list(_RECORDERS):
        recorder.close()


class History(Middleware):
    """The App's history as middleware (installed by the App): what an enqueue stored
    anew, and what a worker settled with the seconds it ran (`Outcome.ran`; an outcome
    settled outside a worker, by deferq.testing, is not counted). The recorder, and the
    store under it, are opened on first use."""

    def __init__(self, backend: Callable[[], Backend], lease: float) -> None:
        self._store_of = backend
        self.lease = lease  # the App's: a leased job's wait ends at lease_until - lease
        self._recorder: HistoryRecorder | None = None
        self._lock = threading.Lock()

    @property
    def recorder(self) -> HistoryRecorder:
        if self._recorder is None:
            backend = self._store_of()
            with self._lock:
                if self._recorder is None:
                    self._recorder = HistoryRecorder(backend)
        return self._recorder

    def close(self) -> None:
        """Write what is left; a later use opens a new recorder."""
        recorder, self._recorder = self._recorder, None
        if recorder is not None:
            recorder.close()

    def after_store(self, items: list[Enqueue], jobs: list[Job]) -> None:
        self.recorder.enqueued(items, jobs)

    def worker_stopped(self) -> None:
        self.recorder.write()  # a worker's last seconds of counts (a side record: never waits out an outage)

    def after_settle_many(self, settled: list[Settled]) -> None:
        """A settled batch counted at once: one clock read and one hook call a batch."""
        counted = [(outcome, outcome.ran) for outcome, _ in settled if outcome.ran is not None]
        if counted:
            self.recorder.settled(counted, self.lease)


# -- reading ---------------------------------------------------------------------------------


def read(
    backend: Backend, minutes: int, step: int, queue: str | None = None, task: str | None = None
) -> dict[str, Any]:
    """The last `minutes` minutes (the current one included) of a queue, a task, both or
    everything, in points of `step` minutes: counts, and wait and run percentiles merged
    over each point's minutes. Columnar, ready for a chart: `t` (each point's start,
    epoch seconds) and one list per series; `totals` over the whole window."""
    last = minute_of(backend.now())
    first = last - minutes + 1
    first -= (first - (last + 1)) % step  # whole steps ending with the current minute
    points = (last + 1 - first) // step
    counts = {name: [0] * points for name in COUNTS}
    hists: dict[str, list[Histogram]] = {kind: [Histogram() for _ in range(points)] for kind in (WAIT, RUN)}
    for minute, field, amount in backend.history_read(first, last + 1, queue, task):
        point = (minute - first) // step
        if not 0 <= point < points:
            continue
        if field in counts:
            counts[field][point] += int(amount)
        elif field[:1] in hists and field[1:].isdigit():
            hists[field[:1]][point].merge({int(field[1:]): int(amount)})
    series: dict[str, list[Any]] = {"t": [(first + i * step) * 60 for i in range(points)], **counts}
    totals: dict[str, Any] = {name: sum(values) for name, values in counts.items()}
    for kind, name in ((WAIT, "wait"), (RUN, "run")):
        whole = Histogram()
        for histogram in hists[kind]:
            whole.merge(histogram)
        for p in PERCENTILES:
            series[f"{name}_p{p}"] = [h.percentile(p) for h in hists[kind]]
            totals[f"{name}_p{p}"] = whole.percentile(p)
    return {"queue": queue, "task": task, "minutes": points * step, "step": step, "series": series,
            "totals": totals}
