"""Retry schedules: how long to wait before the next attempt.

A schedule is a callable `(attempt) -> seconds`, where `attempt` is the number of
attempts made so far (1 after the first failure). Any such callable will do.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

Backoff = Callable[[int], float]


def _check(name: str, value: float) -> float:
    if value < 0:
        raise ValueError(f"backoff {name} must not be negative, got {value}")
    return float(value)


@dataclass(frozen=True)
class fixed:  # noqa: N801 - used like a function: backoff.fixed(10)
    """The same wait every time."""

    seconds: float = 10.0

    def __post_init__(self) -> None:
        _check("seconds", self.seconds)

    def __call__(self, attempt: int) -> float:
        return self.seconds


@dataclass(frozen=True)
class linear:  # noqa: N801
    """Waits of `(step*n + first)` units: the default is seed 002's 2n+1 minutes.

    Attempt 1 waits 1 minute, then 3, 5, 7 ... (S2-6), capped at `cap` seconds.
    """

    first: float = 1.0
    step: float = 2.0
    unit: float = 60.0
    cap: float | None = None

    def __post_init__(self) -> None:
        for name in ("first", "step", "unit"):
            _check(name, getattr(self, name))

    def __call__(self, attempt: int) -> float:
        n = max(attempt, 1) - 1
        delay = (self.first + self.step * n) * self.unit
        return min(delay, self.cap) if self.cap is not None else delay


@dataclass(frozen=True)
class exponential:  # noqa: N801
    """`first * base**(attempt-1)` seconds, capped, with jitter.

    With `jitter=True` the wait is drawn uniformly from [delay/2, delay] ("equal
    jitter"), so retries of many jobs that failed together spread out but never
    come sooner than half the nominal wait.
    """

    base: float = 2.0
    first: float = 1.0
    cap: float = 600.0
    jitter: bool = True

    def __post_init__(self) -> None:
        _check("first", self.first)
        _check("cap", self.cap)
        if self.base < 1:
            raise ValueError(f"backoff base must be at least 1, got {self.base}")

    def nominal(self, attempt: int) -> float:
        exponent = max(attempt, 1) - 1
        try:
            return min(self.first * self.base**exponent, self.cap)
        except OverflowError:  # large attempts: far past any cap
            return self.cap

    def __call__(self, attempt: int) -> float:
        delay = self.nominal(attempt)
        return random.uniform(delay / 2, delay) if self.jitter else delay


DEFAULT = exponential()
