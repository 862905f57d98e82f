"""saq on Redis: `await queue.enqueue` in one coroutine, `scheduled=` for C (whole epoch
seconds: C's due time is rounded up to one), and one `saq bench.peers.saq.settings
--workers 2` (a parent and a forked child, 10 concurrent jobs each by default). saq has
no batch enqueue (`queue.batch()` only groups jobs for cancellation)."""

from __future__ import annotations

import math
from typing import Any

from saq import Queue

from . import base, probe


async def noop(ctx: dict[str, Any], *, n: int, text: str) -> None:
    return None


async def incr(ctx: dict[str, Any], *, total: int) -> None:
    await probe.incr_async(probe.async_client(), total)


async def stamp(ctx: dict[str, Any], *, t0: float) -> None:
    await probe.stamp_async(probe.async_client(), t0)


PARAMS = {"noop": ("n", "text"), "incr": ("total",), "stamp": ("t0",)}  # it takes kwargs only


def settings() -> dict[str, Any]:
    """The worker's settings (saq calls this in each worker process)."""
    return {"queue": Queue.from_url(probe.REDIS_URL), "functions": [noop, incr, stamp]}


class Peer(base.AsyncPeer):
    name = "saq"
    dists = ("saq",)
    due_whole_seconds = True

    async def open_async(self) -> None:
        self.queue = Queue.from_url(probe.REDIS_URL)
        await self.queue.connect()

    async def close_async(self) -> None:
        await self.queue.disconnect()

    async def send_async(self, task: str, args: tuple[Any, ...], due: float | None = None) -> None:
        kwargs = dict(zip(PARAMS[task], args, strict=True))
        if due is None:
            await self.queue.enqueue(task, **kwargs)
        else:
            await self.queue.enqueue(task, scheduled=math.ceil(due), **kwargs)

    def worker_commands(self) -> list[list[str]]:
        return [[base.cli("saq"), "bench.peers.saq.settings", "--workers", str(base.WORKER_PROCESSES)]]
