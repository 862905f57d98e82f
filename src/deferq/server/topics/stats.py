"""Delivery counts made by the workers, shared through the store so /metrics can show them.

Workers have no HTTP endpoint; the server runs no jobs. So each worker process keeps
running totals of its callback attempts (by topic and decision, and their durations)
and writes them as one record in kv namespace "delivery-stats" (key: the process's own
id, kept for RECORD_TTL after its last write). The server sums the live records at each
scrape.

The totals reach the store within PUBLISH_SECONDS of every attempt: the first attempt
after a quiet period is published at once; attempts that follow within the period are
published together by a timer at its end (so a burst costs one write per period, and
the last attempt of a burst is never left waiting for the next one). The totals of a
process that stopped before its timer fired miss those last seconds; a process's record
expires RECORD_TTL after it stopped, which Prometheus sees as a counter reset.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

import orjson

from ..http.logfiles import DELIVERY_LOG

if TYPE_CHECKING:
    from ...backends import Backend

log = logging.getLogger(DELIVERY_LOG)  # where delivery.py reports the same failure

NAMESPACE = "delivery-stats"
PUBLISH_SECONDS = 5.0  # DEFERQ_DELIVERY_STATS_SECONDS overrides it (0: after every attempt)
RECORD_TTL = 86400.0
DECISIONS = ("succeeded", "retry", "dead")


class DeliveryStats:
    """One worker process's running totals: {topic: {decision: [count, seconds]}}.

    `add` each attempt; when `due()`, `publish(backend)` (off the event loop). Between
    two due publishes, a timer thread publishes what was added since, through the backend
    of the last publish."""

    def __init__(self) -> None:
        self.key = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.totals: dict[str, dict[str, list[float]]] = {}
        self.every = float(os.environ.get("DEFERQ_DELIVERY_STATS_SECONDS", PUBLISH_SECONDS))
        self.published = -float("inf")  # the first attempt is published at once
        self.dirty = False
        self._lock = threading.Lock()  # the totals (added on the event loop, read by publishers)
        self._writing = threading.Lock()  # one write at a time, so an older one never lands last
        self._store: Backend | None = None
        self._timer: threading.Timer | None = None

    def add(self, topic: str, decision: str, seconds: float) -> None:
        with self._lock:
            entry = self.totals.setdefault(topic, {}).setdefault(decision, [0, 0.0])
            entry[0] += 1
            entry[1] += seconds
            self.dirty = True

    def due(self) -> bool:
        """Publish now? When not (the period has not passed), the timer will."""
        with self._lock:
            if not self.dirty:
                return False
            left = self.published + self.every - time.monotonic()
            if left <= 0:
                return True
            if self._store is not None and self._timer is None:
                self._timer = threading.Timer(left, self._publish_late)
                self._timer.daemon = True
                self._timer.name = "deferq-delivery-stats"
                self._timer.start()
            return False

    def publish(self, backend: Backend) -> None:
        """Write the totals (blocking: call it off the event loop)."""
        with self._writing:
            with self._lock:
                self._store = backend
                self.published = time.monotonic()
                self.dirty = False
                record = orjson.dumps(self.totals)
            try:
                backend.kv_put(NAMESPACE, self.key, record, ttl=RECORD_TTL)
            except BaseException:
                with self._lock:
                    self.dirty = True  # the next attempt (or its timer) tries again
                raise

    def _publish_late(self) -> None:
        with self._lock:
            self._timer = None
            backend = self._store if self.dirty else None
        if backend is None:
            return
        try:
            self.publish(backend)
        except Exception as exc:  # noqa: BLE001 - counts must never fail anything
            log.warning("delivery counts not published: %s", exc)


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
