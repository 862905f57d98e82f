"""A small time-bound cache for store look-ups on the request path (tokens, topics)."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class Cached(Generic[V]):
    """Values kept `seconds` after they were looked up, at most `size` of them (the oldest
    leave first). Concurrent misses of one key share a single look-up, so an expired
    entry under load costs one store call, not one per waiting request."""

    def __init__(self, seconds: float, size: int = 1000) -> None:
        self.seconds = seconds
        self.size = size
        self._entries: OrderedDict[str, tuple[V, float]] = OrderedDict()
        self._pending: dict[str, asyncio.Future[V]] = {}

    async def get(self, key: str, load: Callable[[], Awaitable[V]]) -> V:
        entry = self._entries.get(key)
        if entry is not None and time.monotonic() - entry[1] < self.seconds:
            return entry[0]
        pending = self._pending.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            value = await load()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # waiters re-raise it; nobody else needs to see it
            raise
        finally:
            del self._pending[key]
        future.set_result(value)
        self._entries[key] = (value, time.monotonic())
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return value

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()
