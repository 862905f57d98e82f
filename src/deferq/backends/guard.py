"""One way to live through a store outage, for the worker, the master and the server.

Every backend turns its driver's failures into `StoreUnavailable` at its boundary
(backends/base.py), so "is this a store failure?" is one isinstance check, here. The
guard says once that the store went down, backs off while it stays down, and says how
long it was gone when it answers again; the caller decides what else to do (the
master sends alerts, the worker waits, the server answers 503).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import SchemaOutdated, StoreUnavailable, first_line

T = TypeVar("T")

#: What the store raises when it cannot be used now (a later call may succeed).
STORE_FAILURES = (StoreUnavailable, SchemaOutdated)


class StoreGuard:
    """Runs store calls; a store failure is logged once, not raised, until the store is back."""

    def __init__(
        self,
        log: logging.Logger,
        on_down: Callable[[BaseException], None] | None = None,
        on_up: Callable[[float], None] | None = None,
        down: str = "store unreachable, retrying: %s",
        back: str = "store is back after %.1fs",
        down_level: int = logging.ERROR,
    ) -> None:
        self.log = log
        self.messages = (down_level, down, back)
        self.on_down = on_down
        self.on_up = on_up
        self.down_since: float | None = None

    @property
    def up(self) -> bool:
        return self.down_since is None

    def call(self, fn: Callable[..., T], *args: Any) -> tuple[bool, T | None]:
        """(True, result), or (False, None) when the store failed. Other errors raise."""
        try:
            result = fn(*args)
        except STORE_FAILURES as exc:
            self.failed(exc)
            return False, None
        self.succeeded()
        return True, result

    def failed(self, exc: BaseException) -> None:
        if self.down_since is not None:
            return
        self.down_since = time.monotonic()
        level, down, _ = self.messages
        self.log.log(level, down, first_line(str(exc)) or type(exc).__name__)
        if self.on_down is not None:
            self.on_down(exc)

    def succeeded(self) -> None:
        if self.down_since is None:
            return
        down_for = time.monotonic() - self.down_since
        self.down_since = None
        self.log.warning(self.messages[2], down_for)
        if self.on_up is not None:
            self.on_up(down_for)

    def backoff(self) -> float:
        """Seconds to wait before the next try: 0.1 s doubling to 1 s while it stays down."""
        if self.down_since is None:
            return 0.0
        return min(0.1 * 2 ** min(time.monotonic() - self.down_since, 3), 1.0)
