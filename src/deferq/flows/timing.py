"""When a schedule fires: a cron expression read in a time zone, or a fixed interval.

Cron is read on the wall clock of its zone (`tz`, an IANA name such as
"Europe/Berlin"; UTC when none is given). Across a daylight-saving change:

- a wall time the change skips (02:30 on a spring-forward night in Berlin) fires once,
  shifted by the length of the gap (03:30 summer time), as Python's zoneinfo reads a
  time that does not exist (PEP 495, fold=0);
- a wall time the change repeats (02:30 on a fall-back night) fires once, at its first
  occurrence (summer time).

So each wall time a cron expression names fires exactly once. For "every N seconds"
whatever the wall clock does, use `every`: ticks fall on whole multiples of the
interval since the Unix epoch, so every process computes the same ones.

croniter and zoneinfo are imported when a cron schedule or a zone is first read: a
worker whose app declares none does not hold them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    from croniter import croniter

SHIFT = timedelta(hours=3)  # more than any zone's daylight-saving change (candidates looked past)


def zone(name: str | None) -> ZoneInfo | None:
    """The zone named, or None for UTC; an unknown name is refused in one sentence."""
    if name is None or name == "UTC":
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown time zone {name!r}: use an IANA name such as 'Europe/Berlin'") from None


@dataclass(frozen=True)
class Timing:
    """A cron expression in a zone, or an interval in seconds (exactly one of them)."""

    cron: str | None = None
    every: float | None = None
    tz: str | None = None

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every is None):
            raise ConfigError("a schedule needs either cron or every (not both)")
        if self.cron is not None and (not isinstance(self.cron, str) or not _croniter().is_valid(self.cron)):
            raise ConfigError(f"{self.cron!r} is not a valid cron expression (five fields, or six with seconds)")
        if self.every is not None:
            if isinstance(self.every, bool) or not isinstance(self.every, int | float) or not math.isfinite(
                    self.every) or self.every < 1:
                raise ConfigError(f"every must be at least one second, got {self.every!r}")
            if self.tz is not None:
                raise ConfigError("tz applies to cron schedules; every counts seconds whatever the zone")
        zone(self.tz)

    def next_after(self, moment: float) -> float:
        """The first tick strictly after `moment` (epoch seconds)."""
        if self.every is not None:
            return float((math.floor(moment / self.every) + 1) * self.every)
        assert self.cron is not None
        croniter = _croniter()
        where = zone(self.tz)
        if where is None:
            return float(croniter(self.cron, moment).get_next(float))
        # Walk the wall-clock matches from a little before `moment`'s wall time: a
        # skipped time maps later than the real times right after it, so the earliest
        # fire after `moment` is the least of the matches within SHIFT of the first one.
        wall = datetime.fromtimestamp(moment, where).replace(tzinfo=None) - SHIFT
        walk = croniter(self.cron, wall)
        best: float | None = None
        best_wall: datetime | None = None
        while True:
            candidate: datetime = walk.get_next(datetime)
            if best_wall is not None and candidate > best_wall + SHIFT:
                return best  # type: ignore[return-value]
            fires = candidate.replace(tzinfo=where, fold=0).timestamp()
            if fires > moment and (best is None or fires < best):
                best, best_wall = fires, candidate

    def upcoming(self, moment: float, count: int) -> list[float]:
        """The next `count` ticks after `moment`."""
        ticks: list[float] = []
        for _ in range(count):
            moment = self.next_after(moment)
            ticks.append(moment)
        return ticks

    def describe(self) -> str:
        if self.every is not None:
            return f"every {self.every:g}s"
        return f"{self.cron} ({self.tz or 'UTC'})"


def local_time(moment: float, tz: str | None) -> str:
    """A tick as its zone's wall clock shows it, with the offset: 2026-03-29 03:30:00+02:00."""
    return datetime.fromtimestamp(moment, zone(tz) or UTC).isoformat(sep=" ")


def _croniter() -> type[croniter]:
    from croniter import croniter

    return croniter
