"""arq: `await pool.enqueue_job` in one coroutine, `_defer_until` for C, and two
`arq bench.peers.arq.WorkerSettings` processes (library defaults: polls every 0.5 s).
arq has no batch call."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from arq import create_pool
from arq.connections import RedisSettings

from . import base, probe

_url = urlsplit(probe.REDIS_URL)
REDIS = RedisSettings(host=_url.hostname or "127.0.0.1", port=_url.port or 6379,
                      database=int(_url.path.strip("/") or 0))
LOG_CONFIG = {"version": 1, "disable_existing_loggers": False,
              "loggers": {"arq": {"level": "WARNING"}}}


async def noop(ctx: dict[str, Any], n: int, text: str) -> None:
    return None


async def incr(ctx: dict[str, Any], total: int) -> None:
    await probe.incr_async(ctx["redis"], total)


async def stamp(ctx: dict[str, Any], t0: float) -> None:
    await probe.stamp_async(ctx["redis"], t0)


class WorkerSettings:
    functions = [noop, incr, stamp]
    redis_settings = REDIS


class Peer(base.AsyncPeer):
    name = "arq"
    dists = ("arq",)

    async def open_async(self) -> None:
        self.pool = await create_pool(REDIS)

    async def close_async(self) -> None:
        await self.pool.aclose()

    async def send_async(self, task: str, args: tuple[Any, ...], due: float | None = None) -> None:
        if due is None:
            await self.pool.enqueue_job(task, *args)
        else:
            await self.pool.enqueue_job(task, *args, _defer_until=datetime.fromtimestamp(due, UTC))

    def worker_commands(self) -> list[list[str]]:
        command = [base.cli("arq"), "bench.peers.arq.WorkerSettings",
                   "--custom-log-dict", "bench.peers.arq.LOG_CONFIG"]
        return [command] * base.WORKER_PROCESSES
