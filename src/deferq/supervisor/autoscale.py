"""How many processes a pool should run: pure logic, no processes or clocks of its own.

The rule (S1-6), with hysteresis so a pool does not flap:
- **grow** when the pool is *busy*: more than `up_backlog` due jobs wait per process, or
  the oldest due job has waited longer than `up_wait`. It grows at once to the count
  the backlog asks for (backlog / up_backlog, at least one more), capped at `maximum`,
  and then waits `up_every` before growing again, so new children get time to start.
- **shrink** by one process when the pool has been *calm* for `down_after` seconds
  without a break: even one process fewer would carry at most half of `up_backlog`
  per process, and the oldest job waited less than half of `up_wait`. After a shrink,
  the next one needs another `down_after` of calm.
- Between busy and calm nothing changes; any busy moment restarts the calm clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ScaleRules:
    minimum: int
    maximum: int
    up_backlog: int = 100  # due jobs waiting per process above which the pool grows
    up_wait: float = 30.0  # seconds the oldest due job may wait before the pool grows
    up_every: float = 5.0  # seconds between two growth steps
    down_after: float = 60.0  # seconds of calm before one process goes

    def clamp(self, count: int) -> int:
        return max(self.minimum, min(self.maximum, count))


@dataclass(frozen=True)
class Load:
    backlog: int  # due jobs waiting in the pool's queues
    oldest_wait: float  # seconds the oldest of them has waited


@dataclass(frozen=True)
class ScaleState:
    target: int
    last_up: float = -math.inf  # when the pool last grew
    calm_since: float | None = None  # since when it has been calm without a break


def is_busy(rules: ScaleRules, target: int, load: Load) -> bool:
    return load.backlog > rules.up_backlog * target or load.oldest_wait > rules.up_wait


def is_calm(rules: ScaleRules, target: int, load: Load) -> bool:
    return (load.backlog * 2 <= rules.up_backlog * (target - 1) and load.oldest_wait * 2 <= rules.up_wait) or (
        load.backlog == 0 and load.oldest_wait == 0
    )


def decide(rules: ScaleRules, state: ScaleState, load: Load, now: float) -> tuple[ScaleState, str]:
    """The next state, and why the target changed ("" when it did not)."""
    target = rules.clamp(state.target)
    if target != state.target:
        return ScaleState(target, state.last_up), f"limits are now {rules.minimum}-{rules.maximum}"
    if is_busy(rules, target, load):
        if target >= rules.maximum or now - state.last_up < rules.up_every:
            return replace(state, calm_since=None), ""
        wanted = math.ceil(load.backlog / rules.up_backlog)
        grown = rules.clamp(max(target + 1, wanted))
        return ScaleState(grown, last_up=now), (
            f"busy: {load.backlog} job(s) waiting, the oldest for {load.oldest_wait:.1f}s"
        )
    if not is_calm(rules, target, load):
        return replace(state, calm_since=None), ""
    if state.calm_since is None:
        return replace(state, calm_since=now), ""
    if target > rules.minimum and now - state.calm_since >= rules.down_after:
        return ScaleState(target - 1, state.last_up, calm_since=now), (
            f"calm for {now - state.calm_since:.0f}s: {load.backlog} job(s) waiting"
        )
    return state, ""
