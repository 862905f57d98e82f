"""A limit's values: a rate ("100/m") and a concurrency (a number of slots)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# what RATE reads with a count and a period above 0 (the HTTP models check text with it)
POSITIVE_RATE = (r"^\s*0*[1-9][0-9]*\s*/\s*(?:[0-9]*[1-9][0-9]*(?:\.[0-9]+)?|0*\.[0-9]*[1-9][0-9]*)?"
                 r"\s*[smhd]\s*$")
RATE = re.compile(r"^\s*([0-9]+)\s*/\s*([0-9]*(?:\.[0-9]+)?)\s*(s|m|h|d)\s*$")


@dataclass(frozen=True)
class Rate:
    """`count` runs per `period` seconds, as "100/m", "10/s", "5/30s", "1000/h", "1/d"."""

    count: int
    period: float
    text: str

    @property
    def interval(self) -> float:
        return self.period / self.count

    @classmethod
    def parse(cls, text: Any, name: str = "rate") -> Rate:
        match = RATE.match(text) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f'{name} must look like "100/m" (runs per s, m, h or d), got {text!r:.60}')
        count, times, unit = int(match[1]), float(match[2] or 1), UNITS[match[3]]
        if count < 1 or times <= 0:
            raise ValueError(f"{name} needs at least one run per a period longer than 0, got {text!r:.60}")
        return cls(count, times * unit, text.strip())


def rate_option(value: Any, name: str = "rate") -> Rate:
    return value if isinstance(value, Rate) else Rate.parse(value, name)


def slots(value: Any, name: str = "concurrency") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
        raise ValueError(f"{name} must be a whole number from 1 to 10000, got {value!r:.60}")
    return value
