"""Callback delivery: an ordinary task, "deferq.deliver", so deliveries are leased,
retried, timed out and dead-lettered like any job (S2-4..S2-6).

A worker gets the task in one of two ways:

    deferq worker --app deferq.server.tasks:app --url redis://...     # ready-made App
    deferq.server.delivery.install(my_app)                            # into your own App

One attempt POSTs (or the topic's method) the job's body to the topic's URL, signed,
with a timeout of the topic's ttr. An exception, a timeout, a non-2xx status, an empty
answer or a true retry condition fails the attempt: it is retried after the topic's
backoff until the topic's max_attempts are used up; then the job is dead and an alert
is sent (settings.py says where). Every attempt is one line of the delivery log.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import weakref
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from ..errors import Retry
from ..worker.runner import UnknownTask, current_job
from . import logfiles, signing
from . import topics as topics_module
from .cache import Cached
from .condition import Condition
from .delivery_stats import DeliveryStats
from .settings import AlerterSource

if TYPE_CHECKING:
    from ..app import App
    from ..job import Job

TASK_NAME = "deferq.deliver"
TIMEOUT_MARGIN = 5.0  # the job's timeout is ttr plus this, so the HTTP timeout fires first
USER_AGENT = "deferq-delivery/1"
DELIVERY_LOG_ENV = "DEFERQ_DELIVERY_LOG"

log = logging.getLogger(logfiles.DELIVERY_LOG)


class UnknownTopic(UnknownTask):
    """The job's topic was deleted: no attempt can succeed, so the job goes dead at once."""


def judge(response: httpx.Response, condition: Condition | None) -> str | None:
    """Why this answer means "retry", or None when the delivery succeeded."""
    if not 200 <= response.status_code < 300:
        return f"answered HTTP {response.status_code}"
    text = response.content.strip()
    if not text:
        return "empty answer"
    if condition is None:
        return None
    try:
        answer: Any = orjson.loads(text)
    except orjson.JSONDecodeError:
        answer = response.text  # not JSON: references into it are null
    if condition(answer):
        return f"retry condition is true: {condition.text}"
    return None


class Deliverer:
    """The task body, with the per-process state it needs (HTTP clients, topic cache)."""

    def __init__(self, app: App) -> None:
        self.app = app
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )
        self.topics = Cached(topics_module.CACHE_SECONDS)
        self.stats = DeliveryStats()

    def client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            # trust_env=False: deliver straight to the receiver, never via an environment proxy
            client = httpx.AsyncClient(trust_env=False, follow_redirects=False)
            self._clients[loop] = client
        return client

    async def topic(self, name: str) -> topics_module.Topic | None:
        load = lambda: asyncio.to_thread(topics_module.load, self.app.backend, name)  # noqa: E731
        return await self.topics.get(name, load)

    async def __call__(self, topic: str, body: Any = None, ttr: float | None = None) -> dict[str, Any]:
        found = await self.topic(topic)
        if found is None:
            raise UnknownTopic(f"topic {topic!r} does not exist (deleted?)")
        job = current_job()
        attempt = job.attempts if job else 1
        payload = orjson.dumps(body)
        timeout = _http_timeout(found, ttr, job)
        headers = {
            "content-type": "application/json", "user-agent": USER_AGENT,
            "x-deferq-topic": found.name, "x-deferq-attempt": str(attempt),
            "x-deferq-job-id": job.id if job else "",
            **found.headers, **signing.sign(found.signing_secret, payload),
        }  # fmt: skip
        started = time.monotonic()
        status: int | None = None
        try:
            response = await self.client().request(
                found.method, found.url, content=payload, headers=headers, timeout=timeout
            )
            status = response.status_code
            failure = judge(response, found.condition())
        except httpx.TimeoutException:
            failure = f"no answer within {timeout:g}s"
        except Exception as exc:  # noqa: BLE001 - any failed request is a failed attempt
            failure = f"request failed: {type(exc).__name__}: {exc}"
        duration = time.monotonic() - started
        last = job is None or attempt >= job.max_attempts
        decision = "succeeded" if failure is None else ("dead" if last else "retry")
        delay = None if failure is None or last else float(found.schedule()(attempt))
        log.info(
            "delivery %s %s -> %s (%s)", found.name, found.url, status, decision,
            extra={"topic": found.name, "job": job.id if job else None, "attempt": attempt,
                   "url": found.url, "status": status, "duration_ms": round(duration * 1000, 1),
                   "decision": decision, "reason": failure, "retry_in": delay},
        )  # fmt: skip
        await self.count(found.name, decision, duration)
        if failure is not None:
            raise Retry(delay=delay, reason=f"attempt {attempt}: {failure}")
        return {"status": status, "attempt": attempt, "duration_ms": round(duration * 1000, 1)}

    async def count(self, topic: str, decision: str, seconds: float) -> None:
        """Add the attempt to this process's totals; publish them now and then."""
        self.stats.add(topic, decision, seconds)
        if self.stats.due():
            try:
                await asyncio.to_thread(self.stats.publish, self.app.backend)
            except Exception as exc:  # noqa: BLE001 - counts must never fail a delivery
                log.warning("delivery counts not published: %s", exc)


def _http_timeout(topic: topics_module.Topic, ttr: float | None, job: Job | None) -> float:
    timeout = ttr or topic.ttr
    if job is not None and job.timeout:  # never outlive the job's own timeout
        timeout = min(timeout, max(job.timeout - TIMEOUT_MARGIN, 0.1))
    return timeout


def install(app: App, alerts: AlerterSource | None = None) -> None:
    """Register the delivery task and the dead-letter alert on `app` (once)."""
    if TASK_NAME in app.tasks:
        return
    destination = os.environ.get(DELIVERY_LOG_ENV)
    if destination:
        logfiles.route(logfiles.DELIVERY_LOG, destination)
    deliverer = Deliverer(app)

    async def deliver(topic: str, body: Any = None, ttr: float | None = None) -> dict[str, Any]:
        return await deliverer(topic, body, ttr)

    app.task(deliver, name=TASK_NAME, queue=topics_module.DEFAULT_QUEUE,
             max_attempts=topics_module.DEFAULT_MAX_ATTEMPTS,
             timeout=topics_module.DEFAULT_TTR + TIMEOUT_MARGIN)  # fmt: skip
    source = alerts or AlerterSource(lambda: app.backend)

    @app.on("dead")
    def alert_dead_delivery(job: Job, exc: BaseException | None) -> None:
        if job.task != TASK_NAME:
            return
        topic = job.args[0] if job.args else job.kwargs.get("topic")
        source.get().send(
            "delivery_dead",
            f"callback of topic {topic} gave up after {job.attempts} attempt(s)",
            {"job": job.id, "topic": topic, "attempts": job.attempts, "error": job.error or ""},
        )
