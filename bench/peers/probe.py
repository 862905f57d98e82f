"""The job bodies every peer runs, and where they report: a Redis database of our own.

Each library runs the same three bodies, so the numbers differ only by the library:
- ``noop(n, text)``: workload A's job (it never runs: the store is emptied after A).
- ``incr(total)``: one INCR; the first and the last completion note their time (B).
- ``stamp(t0)``: notes how late it started against ``t0``: the due time (C) or the
  moment the producer called the library (D).
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")

COUNT = "bench:count"  # INCR'd by every incr job
FIRST = "bench:first"  # list: the time of the first completion
LAST = "bench:last"  # list: the time of the completion that made COUNT reach total
LATE = "bench:late"  # list: seconds each stamp job started after its t0

_client: redis.Redis | None = None
_client_pid = 0


def client() -> redis.Redis:
    """One client per process (a forked worker child must not reuse its parent's sockets)."""
    global _client, _client_pid
    if _client is None or _client_pid != os.getpid():
        _client, _client_pid = redis.Redis.from_url(REDIS_URL), os.getpid()
    return _client


_async_client: Any = None
_async_client_pid = 0


def async_client() -> Any:
    """One asyncio client per process, made on first use: for async bodies, whose worker
    process runs one event loop (and a forked child must not reuse its parent's)."""
    global _async_client, _async_client_pid
    if _async_client is None or _async_client_pid != os.getpid():
        import redis.asyncio

        _async_client, _async_client_pid = redis.asyncio.Redis.from_url(REDIS_URL), os.getpid()
    return _async_client


def marks(count: int, total: int) -> list[str]:
    """The timestamp lists an incr job that brought COUNT to `count` appends to."""
    return [key for key, hit in ((FIRST, count == 1), (LAST, count == total)) if hit]


def noop(n: int, text: str) -> None:
    return None


def incr(total: int) -> None:
    r = client()
    for key in marks(r.incr(COUNT), total):
        r.rpush(key, time.time())


def stamp(t0: float) -> None:
    client().rpush(LATE, time.time() - t0)


async def incr_async(r: Any, total: int) -> None:
    for key in marks(await r.incr(COUNT), total):
        await r.rpush(key, time.time())


async def stamp_async(r: Any, t0: float) -> None:
    await r.rpush(LATE, time.time() - t0)
