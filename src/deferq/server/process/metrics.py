"""Prometheus metrics of the HTTP service, and honest about where each number comes from.

Counted by this server process (summed over processes with `--workers N`, through
prometheus-client's multiprocess directory): HTTP requests by route and status, request
durations, and jobs enqueued through the API by queue. They lag by up to two seconds
(the render a scrape gets, and the other processes' flushes).

Read from the store when rendered (so the same from every server): jobs by queue and
state (scheduled / queued / active are the queue depth; succeeded / dead / cancelled
are the finished jobs still kept), the oldest due job's wait per queue, and whether the
store answered.

Counted by the workers that deliver callbacks, published through the store within a few
seconds of each attempt (topics/stats.py): callback attempts by topic and decision,
and their time.
Other tasks' attempts are not counted here: this process runs no jobs.

A scrape is answered from a body rendered at most RENDER_SECONDS ago: scrapes share one
render, made on a thread of its own, so no number of scrapers can take the threads or
the store calls that requests need.
"""

from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ...worker.metric_files import summed_registry
from ..http.cache import Cached
from ..http.overload import SHED_REASONS
from ..topics import stats as delivery_stats

if TYPE_CHECKING:
    from ...backends.base import Backend


class HasStore(Protocol):
    """What the metrics read of a server process: its store (not process/service.py,
    which imports this module)."""

    @property
    def backend(self) -> Backend: ...

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
RENDER_SECONDS = 1.0  # how old the body a scrape gets may be
WAITING = "deferq_http_waiting"
SHED = "deferq_http_shed"
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class StoreCollector:
    """Queue depth and state counts from `backend.stats()`, read when scraped."""

    def __init__(self, service: HasStore) -> None:
        self.service = service

    def collect(self) -> Any:
        up = GaugeMetricFamily("deferq_store_up", "1 if the store answered this scrape")
        jobs = GaugeMetricFamily("deferq_jobs", "Jobs in the store by queue and state",
                                 labels=["queue", "state"])
        oldest = GaugeMetricFamily("deferq_queue_oldest_wait_seconds",
                                   "How long the oldest due job of a queue has waited",
                                   labels=["queue"])
        try:
            stats = self.service.backend.stats()
        except Exception:  # noqa: BLE001 - a scrape reports the store down, it does not fail
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        for queue, queue_stats in sorted(stats.items()):
            for state, count in queue_stats.counts.items():
                jobs.add_metric([queue, state], count)
            oldest.add_metric([queue], queue_stats.oldest_wait)
        yield from (up, jobs, oldest)
        yield from self.deliveries()

    def deliveries(self) -> Any:
        """Callback attempts counted by the workers (topics/stats.py says how)."""
        attempts = CounterMetricFamily(
            "deferq_deliveries", "Callback attempts by topic and decision (succeeded, retry, "
            "dead), counted by the workers", labels=["topic", "decision"])
        seconds = CounterMetricFamily(
            "deferq_delivery_seconds", "Time spent on callback attempts, by topic and decision",
            labels=["topic", "decision"])
        try:
            totals = delivery_stats.summed(self.service.backend)
        except Exception:  # noqa: BLE001
            return
        for (topic, decision), (count, spent) in sorted(totals.items()):
            attempts.add_metric([topic, decision], count)
            seconds.add_metric([topic, decision], spent)
        yield from (attempts, seconds)


class Metrics:
    """Counts are kept in plain dicts on the request path and handed to prometheus-client
    at most once per FLUSH_SECONDS (and before each scrape): a request then costs a dict
    update, not three locked metric updates. Counters may lag by up to FLUSH_SECONDS."""

    FLUSH_SECONDS = 1.0

    def __init__(self, service: HasStore) -> None:
        self.service = service
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter("deferq_http_requests", "HTTP requests by route and status",
                                ["method", "route", "status"], registry=self.registry)
        self.duration = Histogram("deferq_http_request_duration_seconds",
                                  "Time to answer a request", ["route"],
                                  registry=self.registry, buckets=BUCKETS)
        self.enqueued = Counter("deferq_jobs_enqueued", "Jobs stored through this API",
                                ["queue"], registry=self.registry)
        # S3-4 overload (http/overload.py): requests waiting for a slot now, summed over the live
        # processes (the master of `--workers LO..HI` reads it to grow them), those answered busy,
        # and how long the admitted ones waited; kept at once, not at the next flush
        self.waiting = Gauge(WAITING, "API requests waiting for a slot (--overload shed-oldest)",
                             registry=self.registry, multiprocess_mode="livesum")
        self.shed = Counter(SHED, "API requests answered 503 busy past --max-inflight, by reason (refused: "
                            "nothing may wait; full: the oldest waiting when the queue was full; waited: "
                            "past --max-wait)", ["reason"], registry=self.registry)
        self.waited = Histogram("deferq_http_wait_seconds", "Time admitted API requests waited for a slot",
                                registry=self.registry, buckets=BUCKETS)
        self.shed_counts = dict.fromkeys(SHED_REASONS, 0)  # this process's, for GET /v1/server
        self.multiprocess_dir = os.environ.get(MULTIPROCESS_ENV)
        self._requests: dict[tuple[str, str, int], int] = {}
        self._durations: dict[str, list[float]] = {}
        self._enqueued: dict[str, int] = {}
        self._flushed = time.monotonic()
        self._rendered: Cached[bytes] = Cached(RENDER_SECONDS, size=1)
        self._renderer: ThreadPoolExecutor | None = None

    async def scrape(self) -> bytes:
        """The exposition text, rendered at most once per RENDER_SECONDS (concurrent
        scrapes wait for the same render) on the one thread kept for it."""
        return await self._rendered.get("", self._render_off_loop)

    async def _render_off_loop(self) -> bytes:
        self.flush()  # this process's counts, on the thread that gathers them
        if self._renderer is None:
            self._renderer = ThreadPoolExecutor(1, thread_name_prefix="deferq-metrics")
        return await asyncio.get_running_loop().run_in_executor(self._renderer, self.render)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.shutdown(wait=False, cancel_futures=True)
            self._renderer = None

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        self._requests[key] = self._requests.get(key, 0) + 1
        durations = self._durations.get(route)
        if durations is None:
            durations = self._durations[route] = []
        durations.append(seconds)
        if time.monotonic() - self._flushed >= self.FLUSH_SECONDS:
            self.flush()

    def admission(self, outcome: str, waited: float | None, queued: int) -> None:
        """What the overload admission did with a request past --max-inflight."""
        self.waiting.set(queued)
        if outcome in self.shed_counts:
            self.shed_counts[outcome] += 1
            self.shed.labels(outcome).inc()
        elif outcome == "admitted" and waited is not None:
            self.waited.observe(waited)

    def count_enqueued(self, queue: str, count: int = 1) -> None:
        self._enqueued[queue] = self._enqueued.get(queue, 0) + count

    def flush(self) -> None:
        """Hand the counts gathered since the last flush to prometheus-client."""
        self._flushed = time.monotonic()
        requests, self._requests = self._requests, {}
        durations, self._durations = self._durations, {}
        enqueued, self._enqueued = self._enqueued, {}
        for (method, route, status), count in requests.items():
            self.requests.labels(method, route, str(status)).inc(count)
        for route, values in durations.items():
            histogram = self.duration.labels(route)
            for value in values:
                histogram.observe(value)
        for queue, count in enqueued.items():
            self.enqueued.labels(queue).inc(count)

    def render(self) -> bytes:
        """The exposition text (blocking: reads the store)."""
        registry = self.registry
        if self.multiprocess_dir:  # every process's counters, from their shared files
            registry = summed_registry(self.multiprocess_dir)
        registry_with_store = CollectorRegistry(auto_describe=False)
        registry_with_store.register(_Both(registry, StoreCollector(self.service)))
        return generate_latest(registry_with_store)


class _Both:
    def __init__(self, registry: CollectorRegistry, store: StoreCollector) -> None:
        self.registry = registry
        self.store = store

    def collect(self) -> Any:
        yield from self.registry.collect()
        yield from self.store.collect()
