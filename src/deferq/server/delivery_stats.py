"""Delivery counts made by the workers, shared through the store so /metrics can show them.

Workers have no HTTP endpoint; the server runs no jobs. So each worker process keeps
running totals of its callback attempts (by topic and decision, and their durations)
and writes them, at most every PUBLISH_SECONDS, as one record in kv namespace
"delivery-stats" (key: the process's own id, kept for RECORD_TTL after its last write).
The server sums the live records at each scrape. The totals of a process that stopped
less than PUBLISH_SECONDS after its last write miss those last seconds; a process's
record expires RECORD_TTL after it stopped, which Prometheus sees as a counter reset.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from ..backends import Backend

NAMESPACE = "delivery-stats"
PUBLISH_SECONDS = 5.0  # DEFERQ_DELIVERY_STATS_SECONDS overrides it (0: after every attempt)
RECORD_TTL = 86400.0
DECISIONS = ("succeeded", "retry", "dead")


class DeliveryStats:
    """One worker process's running totals: {topic: {decision: [count, seconds]}}."""

    def __init__(self) -> None:
        self.key = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.totals: dict[str, dict[str, list[float]]] = {}
        self.every = float(os.environ.get("DEFERQ_DELIVERY_STATS_SECONDS", PUBLISH_SECONDS))
        self.published = time.monotonic()
        self.dirty = False

    def add(self, topic: str, decision: str, seconds: float) -> None:
        entry = self.totals.setdefault(topic, {}).setdefault(decision, [0, 0.0])
        entry[0] += 1
        entry[1] += seconds
        self.dirty = True

    def due(self) -> bool:
        return self.dirty and time.monotonic() - self.published >= self.every

    def publish(self, backend: Backend) -> None:
        """Write the totals (blocking: call it off the event loop)."""
        self.published = time.monotonic()
        self.dirty = False
        backend.kv_put(NAMESPACE, self.key, orjson.dumps(self.totals), ttl=RECORD_TTL)


def summed(backend: Backend) -> dict[tuple[str, str], tuple[int, float]]:
    """(topic, decision) -> (attempts, seconds), over every worker's live record."""
    result: dict[tuple[str, str], tuple[int, float]] = {}
    for raw in backend.kv_list(NAMESPACE).values():
        try:
            totals: dict[str, Any] = orjson.loads(raw)
            for topic, decisions in totals.items():
                for decision, (count, seconds) in decisions.items():
                    before = result.get((topic, decision), (0, 0.0))
                    result[(topic, decision)] = (before[0] + int(count), before[1] + float(seconds))
        except (ValueError, TypeError, AttributeError):
            continue  # a record this version cannot read is skipped, not a failed scrape
    return result
