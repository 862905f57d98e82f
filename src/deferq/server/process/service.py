"""What one server process holds: the App and its store, caches, the enqueue batcher,
queue limits. Nothing here is the only copy of anything: servers are stateless."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ...app import App
from ...backends.base import Backend, Enqueue
from ...backends.guard import STORE_FAILURES
from ...encryption import Sealer
from ...errors import ConfigError, MissingExtra, PayloadError
from ...job import UNFINISHED_STATES, Job
from ...net import policy as netpolicy
from ...schedules.store import Schedules
from ...task import Task
from ...upkeep import Upkeep
from ..http import auth, logfiles
from ..http.cache import Cached
from ..http.config import ServerConfig
from ..http.errors import ApiError, Invalid
from ..http.overload import Admission
from ..topics import delivery
from ..topics import topic as topics_module
from .metrics import Metrics
from .waits import Waits

T = TypeVar("T")
# A store that fails now, or one this server cannot open at all: 503 either way.
STORE_ERRORS = (*STORE_FAILURES, ConfigError, MissingExtra)
STATS_SECONDS = 1.0  # queue lengths for limits are at most this old

error_log = logging.getLogger(logfiles.ERROR_LOG)


def store_error(exc: BaseException, retry_after: int) -> ApiError | None:
    """The 503 for a store failure, or None when `exc` is not one."""
    if not isinstance(exc, STORE_ERRORS):
        return None
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    reason = lines[-1][:300] if lines else type(exc).__name__
    return ApiError(503, "store_unavailable", f"the store cannot be reached: {reason}",
                    {"Retry-After": str(retry_after)})


class EnqueueBatcher:
    """Coalesces the jobs of concurrent requests into one `enqueue_many` (group commit).

    Requests that arrive while a batch is being stored wait for the next one, so under
    load each store round trip carries many jobs, and when idle a job goes at once. One
    request's failure never fails the others (`_store`).
    """

    def __init__(self, store: Callable[[Sequence[Enqueue]], Any], flights: int = 2,
                 max_items: int = 2000) -> None:
        self.store = store  # async (items) -> list[Job]
        self.flights = max(1, flights)
        self.max_items = max_items
        self._pending: deque[tuple[list[Enqueue], asyncio.Future[list[Job]]]] = deque()
        self._running = 0

    async def enqueue(self, items: list[Enqueue]) -> list[Job]:
        future: asyncio.Future[list[Job]] = asyncio.get_running_loop().create_future()
        self._pending.append((items, future))
        if self._running < self.flights:
            self._running += 1
            asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch: list[tuple[list[Enqueue], asyncio.Future[list[Job]]]] = []
                count = 0
                while self._pending and (not batch or count + len(self._pending[0][0]) <= self.max_items):
                    request = self._pending.popleft()
                    batch.append(request)
                    count += len(request[0])
                await self._store(batch)
        finally:
            self._running -= 1

    async def _store(self, batch: list[tuple[list[Enqueue], asyncio.Future[list[Job]]]]) -> None:
        """Store the requests of `batch` together; if the store refuses them, split the
        batch in halves and store each alone, and so on, so that only a request the store
        refuses by itself gets the error (about 2·log2(n) more round trips per refused request).
        A store that is down (a 503) fails the batch at once: alone, each would too."""
        items = [item for request_items, _ in batch for item in request_items]
        try:
            jobs = await self.store(items)
        except Exception as exc:
            if len(batch) > 1 and not (isinstance(exc, ApiError) and exc.status == 503):
                half = len(batch) // 2
                await self._store(batch[:half])
                await self._store(batch[half:])
                return
            if not isinstance(exc, ApiError):  # the store refused this request alone: one line, no trace
                said = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)[:300]
                error_log.error("the store refused a request's jobs: %s", said,
                                extra={"error_type": type(exc).__name__})
                exc = ApiError(500, "store_refused", f"the store refused the job: {said}")
            for _, future in batch:  # every waiting request gets the failure
                if not future.done():
                    future.set_exception(exc)
            return
        start = 0
        for request_items, future in batch:
            if not future.done():
                future.set_result(jobs[start : start + len(request_items)])
            start += len(request_items)


class QueueLengths:
    """Unfinished jobs per queue, from the store's counts at most STATS_SECONDS old plus
    what this process enqueued since: enough to refuse a full queue without a store
    round trip per request. Several server processes may overshoot a limit by what
    each accepts within one refresh."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.counts: dict[str, int] = {}
        self.added: dict[str, int] = {}
        self.fetched = float("-inf")
        self._lock = asyncio.Lock()

    async def check(self, queue: str, count: int) -> None:
        limit = self.service.config.limit_for(queue)
        if limit is None:
            return
        if time.monotonic() - self.fetched > STATS_SECONDS:
            async with self._lock:
                if time.monotonic() - self.fetched > STATS_SECONDS:
                    stats = await self.service.store(self.service.backend.stats)
                    self.counts = {
                        name: sum(s.counts.get(str(state), 0) for state in UNFINISHED_STATES)
                        for name, s in stats.items()
                    }
                    self.added = {}
                    self.fetched = time.monotonic()
        held = self.counts.get(queue, 0) + self.added.get(queue, 0)
        if held + count > limit:
            raise ApiError(
                429, "queue_full",
                f"queue {queue!r} holds {held} unfinished jobs and its limit is {limit}: "
                "retry later",
                {"Retry-After": str(self.service.config.retry_after)},
            )
        self.added[queue] = self.added.get(queue, 0) + count


class Service:
    def __init__(self, config: ServerConfig, app: App | None = None) -> None:
        self.config = config
        if app is None:
            from ...loading import load_app

            app = load_app(config.app_path, config.url)
        self.app = app
        delivery.install(app)  # so jobs of topics get the delivery task's defaults
        self.network = netpolicy.ForStore(lambda: self.app.url)  # topics and alerts may not name the store
        self.tokens: Cached[str | None] = Cached(auth.CACHE_SECONDS)
        self.topics: Cached[topics_module.Topic | None] = Cached(topics_module.CACHE_SECONDS)
        self._topic_tasks: dict[str, tuple[topics_module.Topic, Task[..., Any]]] = {}
        self.batcher = EnqueueBatcher(self._store_items, config.enqueue_flights)
        self._upkeep: Upkeep | None = None  # start_upkeep
        self.queue_lengths = QueueLengths(self)
        self.metrics = Metrics(self)
        self.admission = Admission(config.max_inflight, config.overload, config.max_waiting, config.max_wait,
                                   self.metrics.admission)
        self.waits = Waits(lambda: self.backend, config, self.store, self.translated)
        self._pool: ThreadPoolExecutor | None = None

    @property
    def sealer(self) -> Sealer | None:
        """The App's encryption at rest: what the API opens and hides (encryption/jobs.py)."""
        return self.app.registry.chain.sealer

    @property
    def backend(self) -> Backend:
        """The store, opened on first use; a store that cannot be opened is a 503."""
        try:
            return self.app.backend
        except Exception as exc:
            failure = store_error(exc, self.config.retry_after)
            if failure is None:
                raise
            error_log.error("cannot open the store: %s", exc)
            raise failure from None

    async def store(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a short blocking store call off the event loop, on this server's pool of
        store threads (waits and metrics have their own); a store failure becomes a 503."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.config.store_threads, thread_name_prefix="deferq-store")
        call = asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args))
        return await self.translated(call, getattr(fn, "__name__", str(fn)))

    async def translated(self, call: Awaitable[T], name: str) -> T:
        """`call`'s result; a store failure is logged and becomes a 503, data of the
        caller's that deferq refuses to store (PayloadError, raised before anything is
        written: an event's data over its size limit, say) a 422."""
        try:
            return await call
        except PayloadError as exc:
            raise Invalid(str(exc)) from None
        except Exception as exc:
            failure = store_error(exc, self.config.retry_after)
            if failure is None:
                raise
            error_log.error("store call %s failed: %s", name, exc,
                            extra={"error_type": type(exc).__name__})
            raise failure from None

    async def enqueue(self, items: list[Enqueue]) -> list[Job]:
        """Store jobs through the App's middleware chain, as every enqueue goes (its
        history among them), the store call batched with other requests'; count them
        by queue."""
        jobs = await self.app.registry.chain.enqueue_async(items, self.batcher.enqueue)
        for item in items:
            self.metrics.count_enqueued(item.job.queue)
        return jobs

    async def _store_items(self, items: Sequence[Enqueue]) -> list[Job]:
        try:
            return await self.backend.enqueue_many_async(items)
        except Exception as exc:
            failure = store_error(exc, self.config.retry_after)
            if failure is None:
                raise
            error_log.error("enqueue failed: %s", exc, extra={"error_type": type(exc).__name__})
            raise failure from None

    async def topic(self, name: str) -> topics_module.Topic | None:
        return await self.topics.get(name, lambda: self.store(topics_module.load, self.backend, name))

    async def topic_task(self, name: str) -> Task[..., Any] | None:
        """The delivery task with the topic's settings (delivery.topic_task), made once
        per read of the topic; None if there is no such topic."""
        topic = await self.topic(name)
        if topic is None:
            return None
        made = self._topic_tasks.get(name)
        if made is None or made[0] is not topic:
            made = self._topic_tasks[name] = (topic, delivery.topic_task(self.app, topic))
        return made[1]

    def forget_topic(self, name: str) -> None:
        self.topics.forget(name)
        self._topic_tasks.pop(name, None)

    async def scope_of(self, token: str) -> str | None:
        """The token's scope, or None for an unknown token (both cached a few seconds)."""
        return await self.tokens.get(token, lambda: self.store(auth.scope_of, self.backend, token))

    def start_upkeep(self) -> None:
        """Take part in the store's upkeep (sweeps and firing schedules, by one process at a
        time: upkeep/), on a thread of its own, until `close`."""
        holder = f"serve:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._upkeep = Upkeep(self.app, holder)
        self._upkeep.start()

    async def declare_schedules(self) -> None:
        """Write the App's schedules to the store, so they are listed and fired (by any
        process that fires schedules); a store that is down now hears of them later."""
        try:
            await self.store(Schedules(self.app).declare, self.app.periodic_jobs)
        except ApiError as exc:
            error_log.warning("the app's schedules are not written to the store: %s", exc)

    def close(self) -> None:
        """Stop the threads (made again if the service is used after) and the App."""
        if self._upkeep is not None:
            self._upkeep.stop()
            self._upkeep = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self.waits.close()
        self.metrics.close()
        self.app.close()
