"""The store's part of the per-minute history (deferq/observe/history.py says what is counted).

A store keeps one counter per (minute, queue, task, field) and only ever adds to it, so
many writers never conflict and never read before they write. Every store implements
`HistoryStore`; `MemoryHistory` is the memory store's (and the reference behaviour the
contract suite holds the others to).

Most counts come from the processes (deferq/observe/history.py): a worker counts what it
settles. What a store ends by itself, outside any settle, the store counts (`count_ended`):
a job whose expiry passed before it ran ("expired", at a lease), and a lease that expired
(`recover_expired`: "dead" or "retried", each also "failed", or "cancelled").
"""

from __future__ import annotations

import logging
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence

from .guard import StoreGuard

Row = tuple[int, str, str, str, int]  # (minute, queue, task, field, amount)
Ended = tuple[str, str, str]  # (queue, task, what the job became: a field of COUNTS)

log = logging.getLogger("deferq.history")
RETENTION_DAYS = float(os.environ.get("DEFERQ_HISTORY_DAYS", 7.0))
MAX_MINUTES = 7 * 1440  # the longest window GET /v1/stats/history serves
# What a lease that expired makes of a job, in history fields (a retry or a death also
# counts as a failed attempt, as when a worker settles them).
RECOVERED = {"dead": ("dead", "failed"), "queued": ("retried", "failed"), "cancelled": ("cancelled",)}


def minute_of(epoch: float) -> int:
    return int(epoch // 60)


def retention_minutes() -> int:
    return max(MAX_MINUTES, int(RETENTION_DAYS * 1440))


def recovered(queue: str, task: str, state: str) -> list[Ended]:
    """The counts of a job whose lease expired and that is now in `state`."""
    return [(queue, task, field) for field in RECOVERED.get(state, ())]


class HistoryStore(ABC):
    @abstractmethod
    def history_add(self, rows: Sequence[Row], keep_minutes: int) -> None:
        """Add each row's amount to its counter, in one round trip. `keep_minutes`: how
        long the rows must be kept at least (a store that expires keys uses it)."""

    @abstractmethod
    def history_read(
        self, first: int, end: int, queue: str | None = None, task: str | None = None
    ) -> list[tuple[int, str, int]]:
        """(minute, field, amount) for minutes in [first, end), summed over the queues and
        tasks that match (None: all of them)."""

    @abstractmethod
    def history_prune(self, before: int) -> int:
        """Delete the counters of minutes before `before`; how many (0 where they expire)."""

    @abstractmethod
    def history_forget(self, queue: str, first: int, end: int) -> None:
        """Delete the counters of `queue` in minutes [first, end) (what a benchmark's
        own queue counted: `deferq bench` leaves nothing of itself behind)."""

    # Where `count_ended` writes: the store itself, or (a shard of several) their whole.
    history_home: HistoryStore | None = None

    def count_ended(self, ended: Iterable[Ended]) -> None:
        """Count, in this minute, jobs the store just ended by itself (module doc). Never
        raises: a count that cannot be written is lost, said once per outage (`history_guard`)."""
        minute = minute_of(time.time())
        cells: dict[tuple[str, str, str], int] = {}
        for cell in ended:
            cells[cell] = cells.get(cell, 0) + 1
        if not cells:
            return
        rows = [(minute, queue, task, field, n) for (queue, task, field), n in sorted(cells.items())]
        home = self.history_home or self
        guard = history_guard(home)
        try:
            home.history_add(rows, retention_minutes())
        except Exception as exc:  # noqa: BLE001 - history must never stop a lease or a recovery
            guard.failed(exc)
        else:
            guard.succeeded()


_guards_lock = threading.Lock()


def history_guard(store: HistoryStore) -> StoreGuard:
    """The one guard of this process's history writes to `store` (the recorders' flushes,
    `count_ended`): history is a side record, so while the server that keeps it is down
    (one Redis shard of several, say) that is said once, as a warning, and once when it
    is written again; jobs go on as before."""
    guard: StoreGuard | None = getattr(store, "_history_guard", None)
    if guard is None:
        with _guards_lock:
            guard = getattr(store, "_history_guard", None)
            if guard is None:
                guard = StoreGuard(log, down="history not written (kept for the next try): %s",
                                   back="history written again after %.1fs", down_level=logging.WARNING)
                store._history_guard = guard  # type: ignore[attr-defined]
    return guard


class MemoryHistory(HistoryStore):
    _history: dict[tuple[int, str, str, str], int]
    _history_lock: threading.Lock

    def _history_cells(self) -> dict[tuple[int, str, str, str], int]:
        cells: dict[tuple[int, str, str, str], int] | None = getattr(self, "_history", None)
        if cells is None:
            cells = self._history = {}
            self._history_lock = threading.Lock()
        return cells

    def history_add(self, rows: Sequence[Row], keep_minutes: int) -> None:
        cells = self._history_cells()
        with self._history_lock:
            for minute, queue, task, field, amount in rows:
                cells[(minute, queue, task, field)] = cells.get((minute, queue, task, field), 0) + amount

    def history_read(
        self, first: int, end: int, queue: str | None = None, task: str | None = None
    ) -> list[tuple[int, str, int]]:
        cells = self._history_cells()
        summed: dict[tuple[int, str], int] = {}
        with self._history_lock:
            for (minute, q, t, field), amount in cells.items():
                if first <= minute < end and queue in (None, q) and task in (None, t):
                    summed[(minute, field)] = summed.get((minute, field), 0) + amount
        return [(minute, field, amount) for (minute, field), amount in sorted(summed.items())]

    def history_prune(self, before: int) -> int:
        cells = self._history_cells()
        with self._history_lock:
            old = [cell for cell in cells if cell[0] < before]
            for cell in old:
                del cells[cell]
        return len(old)

    def history_forget(self, queue: str, first: int, end: int) -> None:
        cells = self._history_cells()
        with self._history_lock:
            for cell in [c for c in cells if c[1] == queue and first <= c[0] < end]:
                del cells[cell]
