"""The per-minute history on the SQL stores: table {history}, queries history_* in each
dialect's queries.sql (backends/history.py states the contract)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..history import HistoryStore, Row
from .plans import Plan, Step


class SQLHistory(HistoryStore):
    q: dict[str, str]
    run: Any  # SQLBackend.run

    def history_step(self, rows: Sequence[Row]) -> Step:
        """The rows as one step: a prepared statement over a batch of named parameters,
        one multi-row INSERT on MySQL (SQLite wraps it in a transaction, PostgreSQL
        binds arrays)."""
        params = [{"minute": m, "queue": q, "task": t, "field": f, "amount": n} for m, q, t, f, n in rows]
        return Step(self.q["history_add"], params, many=True, batch=True)

    def history_add(self, rows: Sequence[Row], keep_minutes: int) -> None:
        if not rows:
            return

        def plan() -> Plan[None]:
            yield self.history_step(rows)

        self.run(plan(), durable=False)

    def history_read(
        self, first: int, end: int, queue: str | None = None, task: str | None = None
    ) -> list[tuple[int, str, int]]:
        def plan() -> Plan[list[tuple[int, str, int]]]:
            reply = yield Step(self.q["history_read"], {"first": first, "end": end, "queue": queue, "task": task})
            return [(int(minute), str(field), int(amount)) for minute, field, amount in reply.rows]

        result: list[tuple[int, str, int]] = self.run(plan())
        return result

    def history_prune(self, before: int) -> int:
        def plan() -> Plan[int]:
            reply = yield Step(self.q["history_prune"], {"before": before})
            return reply.rowcount

        pruned: int = self.run(plan(), durable=False)
        return pruned

    def history_forget(self, queue: str, first: int, end: int) -> None:
        def plan() -> Plan[None]:
            yield Step(self.q["history_forget"], {"queue": queue, "first": first, "end": end})

        self.run(plan(), durable=False)
