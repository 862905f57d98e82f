"""GET /v1/jobs/{id}?wait=N, without letting waits take the threads other requests need.

A wait blocks in the store until it wakes it (Redis BLMOVE, PostgreSQL LISTEN, SQLite's
data version), so it runs on a pool of its own (`wait_threads`), never on the pool of
short store calls that token checks, enqueues and listings use. Each turn on a wait
thread lasts at most SLICE seconds, so a long wait gives its thread back between turns.
When every wait thread is taken, a wait polls instead: a short `get` on the store pool
between asyncio sleeps (5 ms growing to 200 ms), taking a wait thread once one is free.
One holder (a token; without auth, a client address) keeps at most `waits_per_token`
waits open at once: one more is a 429.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ...backends.base import WAIT_POLL, Backend
from ...job import Job
from ..http.config import ServerConfig
from ..http.errors import ApiError

# the server's own ways (service.py) to run a short store call and to translate a failure
ShortCall = Callable[..., Awaitable[Any]]
Translated = Callable[[Awaitable[Any], str], Awaitable[Any]]

SLICE = 5.0  # seconds one turn on a wait thread lasts at most


class Waits:
    def __init__(
        self, backend: Callable[[], Backend], config: ServerConfig, store: ShortCall, translated: Translated
    ) -> None:
        self.backend, self.store, self.translated = backend, store, translated
        self.retry_after = config.retry_after
        self.threads = config.wait_threads
        self.per_holder = config.waits_per_token
        self._slots = threading.BoundedSemaphore(self.threads)  # released from the pool's threads
        self._pool: ThreadPoolExecutor | None = None
        self.open: dict[str, int] = {}  # holder -> its waits now open (touched on the loop only)

    async def wait_finished(self, job_id: str, timeout: float, holder: str, who: str) -> Job | None:
        """The job once it has finished, or as it stands after `timeout` seconds; None if
        there is no such job. A 429 when `holder` has its share of waits open already."""
        count = self.open.get(holder, 0)
        if count >= self.per_holder:
            raise ApiError(429, "too_many_waits",
                           f"{who} has {count} waits open (GET /v1/jobs/{{id}}?wait=), the most it may "
                           "hold at once: retry when one has answered, or ask without ?wait",
                           {"Retry-After": str(self.retry_after)})
        self.open[holder] = count + 1
        try:
            return await self._wait(job_id, time.monotonic() + timeout)
        finally:
            self.open[holder] -= 1
            if not self.open[holder]:
                del self.open[holder]

    async def _wait(self, job_id: str, deadline: float) -> Job | None:
        pause = WAIT_POLL[0]
        while True:
            left = max(0.0, deadline - time.monotonic())
            if self._slots.acquire(blocking=False):
                job = await self._turn(job_id, min(left, SLICE))
            else:
                job = await self.store(self.backend().get, job_id)
                if job is not None and not job.state.finished and left > 0:
                    await asyncio.sleep(min(pause, left))
                    pause = min(pause * 2, WAIT_POLL[1])
                    continue
            if job is None or job.state.finished or time.monotonic() >= deadline:
                return job

    async def _turn(self, job_id: str, seconds: float) -> Job | None:
        """One turn of the store's own wait on a wait thread; the slot taken for it is
        given back when the thread is done, not when the request is (it may go away)."""
        try:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="deferq-wait")
            done: Future[Job | None] = self._pool.submit(self.backend().wait_finished, job_id, seconds)
        except BaseException:
            self._slots.release()
            raise
        done.add_done_callback(lambda _: self._slots.release())
        job: Job | None = await self.translated(asyncio.wrap_future(done), "wait_finished")
        return job

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
