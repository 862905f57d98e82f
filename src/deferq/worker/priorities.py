"""Weighted priorities: high:normal:low = 5:3:2 by default (S2-10), never starving.

A smooth weighted round robin (as nginx balances upstreams) picks which priority a
worker prefers on each claim; the other levels follow, so when the preferred level
is empty the claim falls through to the next instead of idling. Over any window of
sum(weights) claims with all levels backlogged, each level leads exactly its weight.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ..job import Priority


class PriorityRotation:
    def __init__(self, weights: Sequence[int] = (5, 3, 2)) -> None:
        if len(weights) != len(Priority.LEVELS) or any(w < 1 for w in weights):
            raise ValueError("priority weights need one positive number per level (high, normal, low)")
        self.weights = tuple(weights)
        self._current = [0] * len(weights)
        self._lock = threading.Lock()

    def next_order(self) -> tuple[int, ...]:
        """The priority levels in the order this claim should try them."""
        with self._lock:
            total = sum(self.weights)
            for level, weight in enumerate(self.weights):
                self._current[level] += weight
            lead = max(range(len(self.weights)), key=lambda level: self._current[level])
            self._current[lead] -= total
        return (lead, *(level for level in Priority.LEVELS if level != lead))
