"""Checking values of configuration files: durations ("90s", "5m", "1h30m"), keys, addresses;
and how long a job may wait, the caps of every delay (one place for each).

A leaf beside errors.py, not part of the supervisor: the [alerts] table (read by the
supervisor and by the HTTP service) and the [periodic] tables (schedule.py, core) are
checked with these too, and neither may reach up into the supervisor for them.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import ConfigError

# The longest waits. A producer's delay or due time, a durable sleep or wait beyond them is
# refused with a sentence; a delay a task raises (Retry, Snooze, Backoff: often a called
# service's Retry-After) is clamped to them, with a warning.
MAX_DELAY = 10 * 365 * 86400.0  # ten years: enqueue's delay, a sleep, a wait, a Retry, a Snooze
LATEST_DUE = 253402300799.0  # 9999-12-31T23:59:59Z: later due times are refused
MAX_PAUSE = 7 * 86400.0  # seven days: a limit's pause, set (PUT /v1/limits) or by a Backoff


def capped(seconds: float, cap: float = MAX_DELAY) -> float:
    """`seconds` within 0..`cap`: inf is `cap`, NaN and below 0 are 0."""
    return min(seconds, cap) if seconds > 0 else 0.0


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(value: Any, where: str) -> float:
    """Seconds from a number or a string like "1h30m"; `where` names the setting in errors."""
    wrong = ConfigError(f'{where} must be a duration like "30s", "5m" or "1h", got {value!r}')
    if isinstance(value, bool):
        raise wrong
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip().lower().replace(" ", "")
        parts = _PART.findall(text)
        if "".join(number + unit for number, unit in parts) != text:
            raise wrong
        seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    else:
        raise wrong
    if seconds < 0:
        raise ConfigError(f"{where} must not be negative, got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """A short human form: 42s, 3m05s, 2h10m."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def host_port(value: Any, where: str, default_port: int) -> tuple[str, int]:
    """("host", port) from "host:port" (or "host" with the default port)."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f'{where} must be "host:port", got {value!r}')
    host, sep, port_text = value.rpartition(":")
    if not sep:
        return value, default_port
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(f'{where} must be "host:port", got {value!r}')
    return host.strip("[]"), int(port_text)


def no_unknown_keys(table: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    """Refuse a key that is not one of `known` (a typo must not be silently ignored)."""
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r} in {where}: known keys are {', '.join(known)}")
