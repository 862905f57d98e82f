"""How one server process admits API requests past `--max-inflight` (S3-4).

Two ways, chosen with `deferq serve --overload`:

- `refuse` (the default): past the bound, a request is answered `503 busy` at once, the
  newest shed first. A client that retries finds a free slot a moment later.
- `shed-oldest`: past the bound, a request waits its turn in a bounded queue, served in
  order of arrival. When the queue is full, the *oldest* waiting request is answered busy
  to make room for the new one, and a request that has waited `--max-wait` seconds is
  answered busy too: under a burst the freshest requests, whose clients are still
  waiting, are the ones served.

A slot that frees is handed straight to the oldest waiting request, so a request that
just arrived never overtakes one that waits.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Literal

Overload = Literal["refuse", "shed-oldest"]
OVERLOADS: tuple[Overload, ...] = ("refuse", "shed-oldest")
#: why a request was answered busy: the bound was reached and nothing waits (refuse), the
#: queue was full and it was the oldest (full), or it waited past --max-wait (waited)
SHED_REASONS = ("refused", "full", "waited")
BUSY_MESSAGES = {
    "refused": "the server is busy: retry later",
    "full": "the server is busy (newer requests took this one's place in its queue): retry later",
    "waited": "the server is busy (this request waited its longest): retry later",
}


class Admission:
    """Slots for API requests in one server process, and the queue before them."""

    def __init__(self, limit: int | None, overload: Overload = "refuse", max_waiting: int = 0,
                 max_wait: float | None = None,
                 noted: Callable[[str, float | None, int], None] | None = None) -> None:
        self.limit = limit
        self.max_waiting = max_waiting if overload == "shed-oldest" else 0
        self.max_wait = max_wait
        self.inflight = 0  # requests being answered
        self.waiting: deque[asyncio.Future[bool]] = deque()
        # noted(outcome, seconds waited or None, requests waiting now): for the metrics
        self.noted = noted or (lambda outcome, waited, queued: None)

    def try_enter(self) -> bool:
        """Take a slot if one is free (no await: the path of every request below the bound)."""
        if self.limit is None or self.inflight < self.limit:
            self.inflight += 1
            return True
        return False

    async def wait_turn(self) -> str | None:
        """After try_enter() failed: None once this request holds a slot, else why it is
        answered busy (one of SHED_REASONS)."""
        if self.max_waiting <= 0:
            self.noted("refused", None, 0)
            return "refused"
        if len(self.waiting) >= self.max_waiting:
            oldest = self.waiting.popleft()
            oldest.set_result(False)  # its own wait_turn notes it as shed
        turn: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.waiting.append(turn)
        self.noted("queued", None, len(self.waiting))
        started = time.monotonic()
        try:
            await asyncio.wait((turn,), timeout=self.max_wait)
        except asyncio.CancelledError:  # the server is stopping or the task was cancelled
            if turn.done() and turn.result():
                self.leave()
            else:
                self._forget(turn)
            raise
        waited = time.monotonic() - started
        if not turn.done():
            self._forget(turn)
            self.noted("waited", waited, len(self.waiting))
            return "waited"
        if turn.result():
            self.noted("admitted", waited, len(self.waiting))
            return None
        self.noted("full", waited, len(self.waiting))
        return "full"

    def leave(self) -> None:
        """A request holding a slot is answered: the slot goes to the oldest waiting one."""
        while self.waiting:
            turn = self.waiting.popleft()
            if not turn.done():
                turn.set_result(True)
                return
        self.inflight -= 1

    def _forget(self, turn: asyncio.Future[bool]) -> None:
        turn.cancel()
        try:
            self.waiting.remove(turn)
        except ValueError:
            pass
