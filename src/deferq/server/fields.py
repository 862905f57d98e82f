"""Reading fields of a JSON request, each problem one sentence naming the field (a 422)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from .errors import Invalid

_MISSING: Any = object()


def only_known(data: dict[str, Any], known: Iterable[str], where: str) -> None:
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise Invalid(f"unknown field {unknown[0]!r} in {where}: fields are {', '.join(known)}")


def number(
    data: dict[str, Any], name: str, default: Any = None, minimum: float = 0.0,
    above: bool = False, maximum: float = 1e12,
) -> Any:  # fmt: skip
    """A finite number >= minimum (> minimum with `above`), or `default` when absent/null."""
    value = data.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Invalid(f"{name} must be a number, got {value!r:.60}")
    if value < minimum or (above and value == minimum) or value > maximum:
        bound = f"above {minimum:g}" if above else f"at least {minimum:g}"
        raise Invalid(f"{name} must be {bound} and at most {maximum:g}, got {value}")
    return value


def integer(data: dict[str, Any], name: str, default: Any = None, minimum: int = 0,
            maximum: int = 1_000_000_000) -> Any:  # fmt: skip
    value = data.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{name} must be a whole number, got {value!r:.60}")
    if not minimum <= value <= maximum:
        raise Invalid(f"{name} must be between {minimum} and {maximum}, got {value}")
    return value


def string(data: dict[str, Any], name: str, default: Any = None, max_length: int = 1000,
           choices: Iterable[str] | None = None) -> Any:  # fmt: skip
    value = data.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise Invalid(f"{name} must be a string, got {value!r:.60}")
    if len(value) > max_length:
        raise Invalid(f"{name} must be at most {max_length} characters")
    if choices is not None and value not in choices:
        raise Invalid(f"{name} must be one of {', '.join(choices)}, got {value!r:.60}")
    return value


def string_map(data: dict[str, Any], name: str) -> dict[str, str]:
    value = data.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise Invalid(f"{name} must be an object of strings, like {{\"X-Team\": \"billing\"}}")
    return dict(value)


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    names: dict[type, str] = {dict: "an object", list: "an array", str: "a string"}
    return names.get(type(value), "a value")


def json_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Invalid(f"{where} must be a JSON object, got {json_type(value)}")
    return value
