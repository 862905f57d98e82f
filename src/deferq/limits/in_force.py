"""The limits in force, as the console's Limits page shows them (GET /v1/stats/limits):
what the code declares (each worker's heartbeat carries its App's declared limits), what
was set at run time (runtime.py), the pauses, and what each uses now where the store can
say so cheaply: the slots held of a concurrency limit with one scope (a task's own, a
key's, a queue's), and the runs a second of a task or a queue over the last one to two
minutes (the per-minute history: one read per limit shown)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..backends.history import minute_of
from ..observe.history import RUN
from .runtime import QUEUE, LimitsAdmin

if TYPE_CHECKING:
    from ..backends.base import Backend

MEASURED = 200  # limits whose use is read (one or two store reads each); the rest show none
KINDS = {"queue": 0, "task": 1, "key": 2}


def in_force(backend: Backend, declared: dict[str, dict[str, Any]], tasks: set[str]) -> list[dict[str, Any]]:
    """One row per limited name: queues, then tasks, then keys. `declared`: task -> its
    declared limits (registry.Limited.to_dict() and its queue); `tasks`: other task names known."""
    set_now = LimitsAdmin(lambda: backend).list()
    rows: list[dict[str, Any]] = []
    for name in sorted(set(declared) | set(set_now)):
        code, stored = declared.get(name), set_now.get(name)
        kind = "queue" if name.startswith(QUEUE) else "task" if code or name in tasks or ":" not in name else "key"
        setting = {"rate": stored["rate"], "concurrency": stored["concurrency"]} if stored else None
        if setting and setting["rate"] is None and setting["concurrency"] is None:
            setting = None  # a pause alone
        queue = name[len(QUEUE):] if kind == "queue" else (code or {}).get("queue")
        rows.append({
            "name": name, "kind": kind, "queue": queue,
            "declared": {k: v for k, v in code.items() if k != "queue"} if code else None, "set": setting,
            "paused_for": stored["paused_for"] if stored else None,
            "rate": (setting or {}).get("rate") or (code or {}).get("rate"),
            "concurrency": (setting or {}).get("concurrency") or (code or {}).get("concurrency"),
            "running": None, "recent_per_s": None,
        })
    rows.sort(key=lambda row: (KINDS[row["kind"]], row["name"]))
    for row in rows[:MEASURED]:
        measure(backend, row)
    return rows


def measure(backend: Backend, row: dict[str, Any]) -> None:
    """The row's use: slots held (one scope only: not a task's per-key limit) and runs a second."""
    declared = row["declared"] or {}
    name: str = row["name"]
    if row["concurrency"] is not None and not declared.get("concurrency_key"):
        row["running"] = len(backend.slot_holders(name))
    if row["kind"] == "key":
        return
    now = time.time()
    first = minute_of(now) - 1
    if row["kind"] == "queue":
        counts = backend.history_read(first, first + 2, queue=row["queue"])
    else:
        counts = backend.history_read(first, first + 2, task=name)
    runs = sum(amount for _, field, amount in counts if field[:1] == RUN and field[1:].isdigit())
    row["recent_per_s"] = round(runs / (now - first * 60), 3)
