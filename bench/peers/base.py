"""The small interface every peer module implements (one class named ``Peer`` each).

A peer knows how to send the three probe jobs with its library's producer API and
how to start its own worker CLI; `workloads.py` does all the timing, the same way
for every peer. Task names are the probe bodies': "noop", "incr", "stamp".
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import probe

ROOT = Path(__file__).resolve().parents[2]  # the repository: workers import bench.peers.*
BIN = Path(sys.executable).parent  # the CLIs installed next to this Python
WORKER_PROCESSES = 2  # as in PEERS.md


def cli(name: str) -> str:
    """The path of a library's console script, installed with it in this environment."""
    path = BIN / name
    if not path.exists():
        raise RuntimeError(f"{name} CLI not found in {BIN} (pip install -e '.[peers]')")
    return str(path)


class Peer:
    """Sync producers: each library call is made in a plain Python loop."""

    name = ""
    label = ""  # its row in the table; the name unless a subclass says more
    dists: tuple[str, ...] = ()  # distributions whose versions the table names
    store = probe.REDIS_URL  # where its jobs live (emptied between workloads)
    batch = False  # has a batch enqueue call (workload "A batch")
    batch_due = False  # its batch call takes a due time (C sends its 500 jobs in batches)
    delays = True  # can run a job at a given time (workload C)
    due_whole_seconds = False  # its due times are whole epoch seconds (C's is rounded up)
    env: dict[str, str] = {}  # extra environment for its workers
    alt_b: tuple[str, int] | None = None  # a second B with `alt_worker_commands`: label, job cap

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        if "label" not in cls.__dict__:
            cls.label = cls.name

    def open(self) -> None:
        """Connect the producer (before timing)."""

    def close(self) -> None:
        """Close the producer."""

    def send(self, task: str, args: tuple[Any, ...], due: float | None = None) -> None:
        raise NotImplementedError

    def send_batch(self, task: str, args: Sequence[tuple[Any, ...]], due: float | None = None) -> None:
        raise NotImplementedError

    def worker_commands(self) -> list[list[str]]:
        raise NotImplementedError

    def alt_worker_commands(self) -> list[list[str]]:
        raise NotImplementedError

    def enqueue_rate(self, count: int, batched: bool) -> float | None:
        """A peer with its own measurement of A (deferq: `deferq bench`'s) returns it here."""
        return None

    # what the workloads call -----------------------------------------------------

    def each(self, task: str, args: Sequence[tuple[Any, ...]], due: float | None = None) -> None:
        """One library call per job."""
        for one in args:
            self.send(task, one, due)

    def batches(self, task: str, args: Sequence[tuple[Any, ...]], size: int, due: float | None = None) -> None:
        """One batch call per `size` jobs."""
        for start in range(0, len(args), size):
            self.send_batch(task, args[start : start + size], due)

    def send_stamp(self) -> None:
        """One stamp job carrying the time just before the library call."""
        self.send("stamp", (time.time(),))


class AsyncPeer(Peer):
    """Async producers: the whole loop of calls runs inside one coroutine."""

    def open(self) -> None:
        self.runner = asyncio.Runner()
        self.runner.run(self.open_async())

    def close(self) -> None:
        runner = getattr(self, "runner", None)
        if runner is not None:
            runner.run(self.close_async())
            runner.close()
            self.runner = None

    async def open_async(self) -> None:
        pass

    async def close_async(self) -> None:
        pass

    async def send_async(self, task: str, args: tuple[Any, ...], due: float | None = None) -> None:
        raise NotImplementedError

    async def send_batch_async(self, task: str, args: Sequence[tuple[Any, ...]]) -> None:
        raise NotImplementedError

    def each(self, task: str, args: Sequence[tuple[Any, ...]], due: float | None = None) -> None:
        async def loop() -> None:
            for one in args:
                await self.send_async(task, one, due)

        self.runner.run(loop())

    def batches(self, task: str, args: Sequence[tuple[Any, ...]], size: int) -> None:
        async def loop() -> None:
            for start in range(0, len(args), size):
                await self.send_batch_async(task, args[start : start + size])

        self.runner.run(loop())

    def send_stamp(self) -> None:
        async def one() -> None:
            await self.send_async("stamp", (time.time(),))

        self.runner.run(one())


def worker_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env
