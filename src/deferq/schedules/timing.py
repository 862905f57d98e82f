"""When a schedule fires: a cron expression read in a time zone, or a fixed interval.

Cron has five fields (minute hour day-of-month month day-of-week), or six with
**seconds first** (``*/10 * * * * *``: every ten seconds), as Quartz, BullMQ and
node-cron read it; or one of @yearly, @monthly, @weekly, @daily, @hourly. An
expression that is not that, names a random (R) or hashed (H) value, or matches no
date (``0 0 31 2 *``) is refused in one sentence.

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

Speed: an expression is parsed once per process (`_parsed`), and a zone's offset
changes are found once per year (`_year_changes`); the next tick then costs one or two
cron lookups on the wall clock, whatever the zone and however dense the expression.
croniter and zoneinfo are imported when a cron schedule or a zone is first read: a
worker whose app declares none does not hold them.
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

MAX_CRON = 200  # characters of an expression
MAX_ZONE = 64  # characters of a zone's name (the longest IANA name has 32)
MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
CHECKED_FROM = 946684800.0  # 2000-01-01: an expression must match a date after it (any will recur)
DAY = 86400
STEP = 3 * DAY  # how far apart a zone's offset is sampled (then bisected)
_OFFSET = re.compile(r"[+-]\d\d:\d\d$")  # a wall time's offset, left off a tick of the same day


def zone(name: Any) -> ZoneInfo | None:
    """The zone named, or None for UTC; an unknown name is refused in one sentence."""
    if name is None or name == "UTC":
        return None
    if not isinstance(name, str) or not 0 < len(name) <= MAX_ZONE or not name.isprintable():
        raise ConfigError(f"unknown time zone {name!r:.80}: use an IANA name such as 'Europe/Berlin'")
    return _zone(name)


@lru_cache(maxsize=512)
def _zone(name: str) -> ZoneInfo:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigError(f"unknown time zone {name!r}: use an IANA name such as 'Europe/Berlin'") from None


class _Cron:
    """A checked expression and its parsed matcher (one per process, shared under a lock)."""

    def __init__(self, cron: str) -> None:
        from croniter import croniter

        self._lock = threading.Lock()
        self._iter = croniter(cron, CHECKED_FROM, second_at_beginning=True)

    def next_wall(self, after: float) -> float:
        """The first matching wall time strictly after `after` (wall-clock seconds, read as UTC)."""
        from croniter import CroniterBadDateError

        with self._lock:
            self._iter.set_current(after, force=True)
            try:
                return float(self._iter.get_next(float))
            except CroniterBadDateError:  # nothing within croniter's 50 years: checked at parse
                raise ConfigError("the expression matches no date within 50 years") from None


def check_cron(cron: Any) -> _Cron:
    """The parsed expression, or a ConfigError with one sentence."""
    if not isinstance(cron, str) or not 0 < len(cron) <= MAX_CRON:
        raise ConfigError(f"a cron expression must be a string of 1 to {MAX_CRON} characters, got {cron!r:.80}")
    return _parsed(" ".join(cron.split()))


@lru_cache(maxsize=4096)
def _parsed(cron: str) -> _Cron:
    from croniter import croniter

    fields = cron.split(" ")
    if cron.startswith("@"):
        if cron.lower() not in MACROS:
            raise ConfigError(f"{cron!r} is not a cron expression: the shortcuts are {', '.join(MACROS)}")
    elif len(fields) not in (5, 6):
        raise ConfigError(f"{cron!r} has {len(fields)} fields: a cron expression has five (minute hour "
                          "day month weekday), or six with seconds first")
    if any(part.upper().startswith(("H", "R")) for field in fields for part in field.split(",")):
        raise ConfigError(f"{cron!r}: random (R) and hashed (H) values are not supported: every process must "
                          "compute the same ticks")
    if not croniter.is_valid(cron, second_at_beginning=True):
        raise ConfigError(f"{cron!r} is not a valid cron expression (five fields, or six with seconds first)")
    parsed = _Cron(cron)
    try:
        parsed.next_wall(CHECKED_FROM)
    except ConfigError:
        raise ConfigError(f"{cron!r} never fires: no date matches it") from None
    return parsed


def _offset(where: ZoneInfo, moment: float) -> float:
    shift = datetime.fromtimestamp(moment, where).utcoffset()
    return 0.0 if shift is None else shift.total_seconds()


@lru_cache(maxsize=2048)
def _year_changes(where: ZoneInfo, year: int) -> tuple[tuple[float, float, float], ...]:
    """The zone's offset changes in a UTC year: (instant, offset before, offset after).
    Found every STEP, then to the second (since 1970 no zone changed its offset twice
    within six days, so no STEP holds two changes)."""
    start = datetime(year, 1, 1, tzinfo=UTC).timestamp()
    end = datetime(year + 1, 1, 1, tzinfo=UTC).timestamp() if year < 9999 else start + 365 * DAY
    changes, moment, offset = [], start, _offset(where, start)
    while moment < end:
        later = min(moment + STEP, end)
        then = _offset(where, later)
        if then != offset:
            low, high = moment, later  # the offset is `offset` at low, `then` at high
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (middle, high) if _offset(where, middle) == offset else (low, middle)
            changes.append((high, offset, _offset(where, high)))
        moment, offset = later, then
    return tuple(changes)


def _first_change(where: ZoneInfo, after: float, until: float) -> tuple[float, float, float] | None:
    """The zone's first offset change in (after, until], if any."""
    year, last = datetime.fromtimestamp(after, UTC).year, min(datetime.fromtimestamp(until, UTC).year, 9998)
    while year <= last:
        for change in _year_changes(where, year):
            if after < change[0] <= until:
                return change
        year += 1
    return None


def _change_before(where: ZoneInfo, moment: float) -> tuple[float, float, float] | None:
    """The zone's last offset change at or before `moment`, within a year or so."""
    year = datetime.fromtimestamp(moment, UTC).year
    for y in (year, year - 1):
        earlier = [c for c in _year_changes(where, y) if c[0] <= moment]
        if earlier:
            return earlier[-1]
    return None


def _next_zoned(cron: _Cron, where: ZoneInfo, moment: float) -> float:
    """The first tick after `moment` of a cron read on `where`'s wall clock.

    The zone's time is cut into spans of one offset by its changes. In a span
    [start, end) of offset `o` that began with a change from `before`, the ticks are the
    matching wall times read with `o` (but not the second pass of a repeated hour), and,
    after a spring forward, the matching wall times of the gap read with `before`
    (zoneinfo's fold=0). The first span with a tick gives the answer; spans whose wall
    times all lie before the first match are passed over without a lookup."""
    offset = _offset(where, moment)
    change = _change_before(where, moment)
    start, before = (change[0], change[1]) if change else (-math.inf, offset)
    after = moment
    first: float | None = None  # the first match after the first span's walls: no later span has one before it
    while True:
        low = after + offset
        if before > offset:  # a fall back: walls before start + before are its repeated hour's second pass
            low = max(low, start + before - 1)
        found = cron.next_wall(low)
        first = found if first is None else first
        ending = _first_change(where, max(after, start), found - offset)  # the span ends before that tick
        best = found - offset if ending is None else math.inf
        if before < offset and after < start + (offset - before):  # a spring forward's gap
            gap = cron.next_wall(max(after + before, start + before - 1))
            if gap < start + offset:
                best = min(best, gap - before)
        if best < math.inf:
            return best
        assert ending is not None
        while ending is not None:  # on to the next span; past those whose walls all come before `first`
            start, before, offset = ending
            ending = _first_change(where, start, first - offset)
        after = start - 0.5


@dataclass(frozen=True)
class Timing:
    """A cron expression in a zone, or an interval in seconds (exactly one of them)."""

    cron: str | None = None
    every: float | None = None
    tz: str | None = None

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every is None):
            raise ConfigError("a schedule needs either cron or every (not both)")
        if self.cron is not None:
            check_cron(self.cron)
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
        cron = check_cron(self.cron)
        where = zone(self.tz)
        # A cron tick is a whole second, so none lies between a moment and its floor; and a
        # whole second plus a zone's offset is exact, where 1772953199.9999998 + 3600 rounds
        # up to the very tick it should find next.
        moment = math.floor(moment)
        return cron.next_wall(moment) if where is None else _next_zoned(cron, where, moment)

    def upcoming(self, moment: float, count: int) -> list[float]:
        """The next `count` ticks after `moment`."""
        ticks: list[float] = []
        for _ in range(count):
            moment = self.next_after(moment)
            ticks.append(moment)
        return ticks

    def label(self) -> str:
        """The timing as given: "0 9 * * 1-5 (Europe/Berlin)" or "every 30s"."""
        if self.every is not None:
            return f"every {self.every:g}s"
        return f"{self.cron} ({self.tz or 'UTC'})"

    def describe(self, now: float | None = None, count: int = 3) -> str:
        """The timing and its next ticks on its zone's clock, so a reader sees what it
        means: "*/10 * * * * * (UTC): next 2026-12-07 09:00:10+00:00, 09:00:20, 09:00:30"."""
        import time

        ticks = [local_time(t, self.tz) for t in self.upcoming(time.time() if now is None else now, count)]
        shown = ticks[:1] + [_OFFSET.sub("", t[11:]) if t[:10] == ticks[0][:10] else t for t in ticks[1:]]
        return f"{self.label()}: next {', '.join(shown)}"


def local_time(moment: float, tz: str | None) -> str:
    """A tick as its zone's wall clock shows it, with the offset: 2026-03-29 03:30:00+02:00."""
    return datetime.fromtimestamp(moment, zone(tz) or UTC).isoformat(sep=" ")
