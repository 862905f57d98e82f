"""taskiq with taskiq-redis's RedisStreamBroker (the one with acknowledgements): `await
task.kiq` in one coroutine, `schedule_by_time` on a ListRedisScheduleSource for C, one
`taskiq worker --workers 2` (a parent and 2 worker processes) and one `taskiq scheduler`.
The scheduler refreshes its schedules every 60 s by default: it runs with
`--update-interval 1`, its smallest, so C measures its timer rather than that refresh.
taskiq has no batch call. Schedules are stored as JSON (the source's default is pickle)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from taskiq import TaskiqScheduler
from taskiq.serializers import JSONSerializer
from taskiq_redis import ListRedisScheduleSource, RedisStreamBroker

from . import base, probe

broker = RedisStreamBroker(url=probe.REDIS_URL)
source = ListRedisScheduleSource(url=probe.REDIS_URL, serializer=JSONSerializer())
scheduler = TaskiqScheduler(broker=broker, sources=[source])


@broker.task(task_name="noop")
async def noop(n: int, text: str) -> None:
    return None


@broker.task(task_name="incr")
async def incr(total: int) -> None:
    await probe.incr_async(probe.async_client(), total)


@broker.task(task_name="stamp")
async def stamp(t0: float) -> None:
    await probe.stamp_async(probe.async_client(), t0)


TASKS = {"noop": noop, "incr": incr, "stamp": stamp}


class Peer(base.AsyncPeer):
    name = "taskiq"
    dists = ("taskiq", "taskiq-redis")

    async def open_async(self) -> None:
        await broker.startup()  # makes the stream's consumer group: jobs sent before the workers start count
        await source.startup()

    async def close_async(self) -> None:
        await source.shutdown()
        await broker.shutdown()

    async def send_async(self, task: str, args: tuple[Any, ...], due: float | None = None) -> None:
        if due is None:
            await TASKS[task].kiq(*args)
        else:
            await TASKS[task].schedule_by_time(source, datetime.fromtimestamp(due, UTC), *args)

    def worker_commands(self) -> list[list[str]]:
        taskiq = base.cli("taskiq")
        return [
            [taskiq, "worker", "bench.peers.taskiq:broker", "--workers", str(base.WORKER_PROCESSES),
             "--log-level", "WARNING"],
            [taskiq, "scheduler", "bench.peers.taskiq:scheduler", "--update-interval", "1",
             "--log-level", "WARNING"],
        ]
