"""The per-minute history on Redis: scripts history_add / history_read (lua/), keys under
one hash tag ({P:history}, keys.py), expiring after the retention (so nothing to prune)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import groupby
from typing import Any

from ..history import HistoryStore, Row
from . import scripts
from .connection import guarded
from .keys import KeySpace
from .scripts import Call


class RedisHistory(HistoryStore):
    keys: KeySpace
    _run: Callable[[Call], Any]

    @guarded
    def history_add(self, rows: Sequence[Row], keep_minutes: int) -> None:
        if not rows:
            return
        args: list[Any] = [keep_minutes * 60 + 120]
        for (minute, queue, task), cell in groupby(sorted(rows), key=lambda row: row[:3]):
            counters = [(field, amount) for *_, field, amount in cell]
            args += [minute, queue, task, len(counters)]
            for field, amount in counters:
                args += [field, amount]
        self._run(Call(scripts.HISTORY_ADD, [self.keys.history_prefix], args))

    @guarded
    def history_read(
        self, first: int, end: int, queue: str | None = None, task: str | None = None
    ) -> list[tuple[int, str, int]]:
        args = [first, end, queue or "", task or ""]
        flat = self._run(Call(scripts.HISTORY_READ, [self.keys.history_prefix], args))
        return [(int(flat[i]), flat[i + 1].decode(), int(flat[i + 2])) for i in range(0, len(flat), 3)]

    def history_prune(self, before: int) -> int:
        return 0  # the keys expire

    @guarded
    def history_forget(self, queue: str, first: int, end: int) -> None:
        self._run(Call(scripts.HISTORY_FORGET, [self.keys.history_prefix], [first, end, queue]))
