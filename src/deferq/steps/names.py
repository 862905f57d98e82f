"""What names a durable job's checkpoints: their kinds, and the rule every name keeps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ConfigError

NAME_LIMIT = 150  # characters of a checkpoint's name (the SQL stores' key column)
KINDS = ("step", "sleep", "wait", "children")  # children: a gather of child jobs (children.py)


def checked_name(name: object, what: str = "a step name", limit: int = NAME_LIMIT) -> str:
    if not isinstance(name, str) or not name or len(name) > limit or any(c < " " for c in name):
        raise ConfigError(f"{what} must be a non-empty string of at most {limit} characters "
                          f"without control characters, got {name!r:.60}")
    return name


def function_name(fn: Callable[..., Any]) -> str:
    """How a checkpoint names the function it ran: module and qualified name."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
