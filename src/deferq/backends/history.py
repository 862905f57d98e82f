"""The store's part of the per-minute history (deferq/history.py says what is counted).

A store keeps one counter per (minute, queue, task, field) and only ever adds to it, so
many writers never conflict and never read before they write. Every store implements
`HistoryStore`; `MemoryHistory` is the memory store's (and the reference behaviour the
contract suite holds the others to).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence

Row = tuple[int, str, str, str, int]  # (minute, queue, task, field, amount)


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
