"""Checking values of configuration files: durations ("90s", "5m", "1h30m"), keys, addresses;
how long a job may wait, the caps of every delay (one place for each); a limit's values (a
rate "100/m", a concurrency); and key templates ("customer:{customer_id}"), the grammar that
limit keys, fair keys and the options naming them share.

A leaf beside errors.py, not part of the supervisor nor of limits/: the [alerts] table (read
by the supervisor and by the HTTP service) and the [periodic] tables (schedules/definition.py) are
checked with these too, and so are the task options (options.py), fair queues and limits;
none may reach up into the room of another for them.
"""

from __future__ import annotations

import inspect
import re
import string
from dataclasses import dataclass
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


UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}  # of a rate's period; a duration's also ms
_UNITS = {"ms": 0.001, **UNITS}
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


# Key templates: text with {argument} fields named after a task's parameters, filled from one
# call's arguments (rate_key, concurrency_key, a task's fair_key, a fair queue's key).


def key_template(value: Any, name: str = "rate_key") -> str:
    """A key template checked: 1-200 characters, each {field} a plain argument name."""
    if not isinstance(value, str) or not 1 <= len(value) <= 200:
        raise ValueError(f"{name} must be text of 1-200 characters, got {value!r:.60}")
    for _, field, spec, conversion in string.Formatter().parse(value):
        if field is not None and (not field.isidentifier() or spec or conversion):
            raise ValueError(f"{name} fields must be plain argument names like {{customer_id}}, got {{{field}}}")
    return value


def fields_of(template: str) -> list[str]:
    return [field for _, field, _, _ in string.Formatter().parse(template) if field]


def could_fill(template: str, key: str) -> bool:
    """Whether some call could fill `template` to make `key` (each {field} any text)."""
    pattern = "".join(re.escape(text) + (".+" if field is not None else "")
                      for text, field, _, _ in string.Formatter().parse(template))
    return re.fullmatch(pattern, key, re.DOTALL) is not None


def check_fields(name: str, template: str | None, task: str, signature: inspect.Signature) -> None:
    """When a task is declared: every {field} of its key template must be one of its parameters."""
    unknown = [f for f in fields_of(template) if f not in signature.parameters] if template else []
    if unknown:
        raise ValueError(f"{name} {template!r} names {unknown[0]!r}, which is not a parameter of {task}")


def filled(template: str, signature: inspect.Signature, task: str, args: Any, kwargs: dict[str, Any],
           what: str) -> str:
    """A key template filled from one call's arguments (limit keys, fair keys); ValueError
    (one sentence) when the call cannot fill it."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise ValueError(f"{what} {template!r} of {task}: the call does not fit the task ({exc})") from None
    bound.apply_defaults()
    return template.format_map({name: _text(value) for name, value in bound.arguments.items()})


def _text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def storable(text: str) -> bool:
    """Text every store keeps as given: no NUL (PostgreSQL refuses it, SQLite's search ends
    its text there) and valid UTF-8 (no lone surrogate)."""
    if "\x00" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
