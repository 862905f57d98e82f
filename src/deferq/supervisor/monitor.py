"""The master's watch on the store: is it up, do queues back up, do jobs go dead (S1-5, S2-4).

Store health is judged by the master's own store calls: the first failure sends a
"store_down" alert, the first success after that a "store_up" alert with the downtime
(the seed's Redis checker). Queue alerts (backlog, oldest waiting, new dead letters,
crash loops) are claimed in the store first (`kv_put(..., only_new=True)` for
`min_interval`), so several masters watching one store send each alert once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..backends.base import Backend, QueueStats
from ..backends.guard import StoreGuard
from ..errors import first_line
from .alerts import Alerter

log = logging.getLogger("deferq.master")
T = TypeVar("T")


class StoreHealth(StoreGuard):
    """The master's store calls: a failure never escapes, and up/down is alerted once."""

    def __init__(self, alerter: Callable[[], Alerter], url: str) -> None:
        super().__init__(log, on_down=self._down, on_up=self._up)
        self._alerter = alerter
        self.url = url
        self.up_since = time.monotonic()  # since when the store has answered without a break

    def call(self, fn: Callable[..., T], *args: Any) -> tuple[bool, T | None]:
        """(True, result), or (False, None) after logging what went wrong."""
        try:
            return super().call(fn, *args)
        except Exception:  # noqa: BLE001 - the master must outlive any error of a store call
            log.exception("store call %s failed", getattr(fn, "__name__", fn))
            return False, None

    def _down(self, exc: BaseException) -> None:
        error = first_line(str(exc)) or type(exc).__name__
        self._alerter().send("store_down", "the store is unreachable", {"url": self.url, "error": error})

    def _up(self, down_for: float) -> None:
        self.up_since = time.monotonic()
        details = {"url": self.url, "down_for_seconds": round(down_for, 1)}
        self._alerter().send("store_up", "the store is reachable again", details)


class Monitor:
    """Compares each sample of queue stats with the [alerts] thresholds."""

    def __init__(self, backend: Backend, health: StoreHealth, alerter: Callable[[], Alerter]):
        self.backend = backend
        self.health = health
        self._alerter = alerter
        self.dead_seen: dict[str, int] | None = None  # dead letters per queue at the last look

    def alert(self, kind: str, subject: str, details: dict[str, Any]) -> None:
        """Send an alert unless another master (or this one) sent this kind just now."""
        alerter = self._alerter()
        if alerter.config.enabled:
            ttl = max(alerter.config.min_interval, 1.0)
            ok, claimed = self.health.call(self.backend.kv_put, "alerts", kind, b"1", ttl, True)
            if ok and not claimed:
                return
        alerter.send(kind, subject, details)

    def check(self, stats: dict[str, QueueStats]) -> None:
        config = self._alerter().config
        for queue, limit in config.backlog.items():
            waiting = stats[queue].counts["queued"] if queue in stats else 0
            if waiting > limit:
                self.alert(f"backlog:{queue}", f"queue {queue} has {waiting} jobs waiting",
                           {"queue": queue, "waiting": waiting, "limit": limit})
        if config.oldest_waiting is not None:
            for queue, queue_stats in stats.items():
                if queue_stats.oldest_wait > config.oldest_waiting:
                    self.alert(
                        f"oldest_waiting:{queue}",
                        f"a job in queue {queue} has waited {queue_stats.oldest_wait:.0f}s",
                        {"queue": queue, "oldest_wait_seconds": round(queue_stats.oldest_wait, 1),
                         "limit_seconds": config.oldest_waiting},
                    )
        self._check_dead(stats, config.dead_letters)

    def _check_dead(self, stats: dict[str, QueueStats], enabled: bool) -> None:
        dead = {queue: s.counts["dead"] for queue, s in stats.items()}
        before, self.dead_seen = self.dead_seen, dead
        if before is None or not enabled:
            return  # the first look is the baseline
        for queue, count in dead.items():
            new = count - before.get(queue, 0)
            if new > 0:
                self.alert(f"dead:{queue}", f"{new} new dead job(s) in queue {queue}",
                           {"queue": queue, "new": new, "dead_total": count})
