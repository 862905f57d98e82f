"""Callback delivery: an ordinary task, "deferq.deliver", so deliveries are leased,
retried, timed out and dead-lettered like any job (S2-4..S2-6).

A worker gets the task in one of two ways:

    deferq worker --app deferq.server.tasks:app --url redis://...     # ready-made App
    deferq.server.topics.delivery.install(my_app)                     # into your own App

One attempt POSTs (or the topic's method) the job's body to the topic's URL, signed,
with a timeout of the topic's ttr, to an address the network policy allows
(net/policy.py). An exception, a timeout, a refused address, a non-2xx status, an empty
answer or a true retry condition fails the attempt: it is retried after the topic's
backoff until the topic's max_attempts are used up; then the job is dead and an alert
is sent (settings.py says where). Every attempt is one line of the delivery log.

The answer is read as a stream and at most the topic's max_answer_bytes of it are kept
(compressed answers count decompressed). Past that, reading stops: the attempt is
decided on the status alone when the retry condition does not look at the answer, and
fails ("answer larger than N bytes") when it does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import weakref
import zlib
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from ...attempt.runner import UnknownTask, current_job
from ...errors import Retry
from ...job import Priority
from ...net import guarded
from ...net import policy as netpolicy
from ...options import JobOptions
from ...task import Call, Task
from ..http import logfiles
from ..http.cache import Cached
from ..http.settings import AlerterSource
from . import signing
from . import topic as topics_module
from .condition import Condition
from .stats import DeliveryStats

if TYPE_CHECKING:
    from ...app import App
    from ...job import Job

TASK_NAME = "deferq.deliver"
TIMEOUT_MARGIN = 5.0  # the job's timeout is ttr plus this, so the HTTP timeout fires first
USER_AGENT = "deferq-delivery/1"
DELIVERY_LOG_ENV = "DEFERQ_DELIVERY_LOG"

log = logging.getLogger(logfiles.DELIVERY_LOG)


class UnknownTopic(UnknownTask):
    """The job's topic was deleted: no attempt can succeed, so the job goes dead at once."""


class Unreadable(Exception):
    """An answer that cannot be kept within the cap, or cannot be decoded at all."""


def _decompressor(encoding: str) -> Any:
    """A zlib decompressor for the answer's Content-Encoding, or None for identity."""
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise Unreadable(f"answer has Content-Encoding {encoding[:40]!r}, which deliveries do not read")


async def read_answer(response: httpx.Response, limit: int) -> bytes:
    """The answer's body, at most `limit` bytes of it (decompressed); raises Unreadable
    past that, having read only a little more than `limit` (or nothing, when the
    answer declares a larger Content-Length)."""
    too_large = Unreadable(f"answer larger than {limit} bytes")
    decompressor = _decompressor(response.headers.get("content-encoding", "").strip().lower())
    declared = response.headers.get("content-length", "")
    if decompressor is None and declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in response.aiter_raw():
        if decompressor is not None:
            try:  # never more than the room left, plus one byte to notice the excess
                chunk = decompressor.decompress(chunk, limit + 1 - len(body))
            except zlib.error as exc:
                raise Unreadable(f"answer cannot be decompressed: {exc}") from None
        body += chunk
        if len(body) > limit:
            raise too_large
    return bytes(body)


def judge(answer: bytes | Unreadable, condition: Condition | None, charset: str | None = None) -> str | None:
    """Why a 2xx answer means "retry", or None when the delivery succeeded. An answer
    that was not read (too large) decides on the status alone, unless the condition
    needs it."""
    if isinstance(answer, Unreadable):
        if condition is not None and condition.reads_answer:
            return str(answer)
        res = None  # the condition does not look at the answer
    else:
        if not answer.strip():
            return "empty answer"
        res = _parsed(answer, charset) if condition is not None else None
    if condition is not None and condition(res):
        return f"retry condition is true: {condition.text}"
    return None


def _parsed(answer: bytes, charset: str | None) -> Any:
    """The answer as JSON, or as text when it is not JSON (references into it are null)."""
    try:
        return orjson.loads(answer.strip())
    except orjson.JSONDecodeError:
        pass
    try:
        return answer.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return answer.decode("utf-8", errors="replace")


class Deliverer:
    """The task body, with the per-process state it needs (HTTP clients, topic cache)."""

    def __init__(self, app: App, network: netpolicy.ForStore) -> None:
        self.app = app
        self.network = network
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )
        self.topics: Cached[topics_module.Topic | None] = Cached(topics_module.CACHE_SECONDS)
        self.stats = DeliveryStats()
        self.policy: netpolicy.Policy | None = None

    async def client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            if self.policy is None:  # the store's URL is final by the first delivery
                self.policy = await asyncio.to_thread(self.network)
            # trust_env=False: deliver straight to the receiver, never via an environment
            # proxy; the transport connects only to addresses the policy allows
            client = httpx.AsyncClient(transport=guarded.GuardedTransport(self.policy),
                                       trust_env=False, follow_redirects=False)
            self._clients[loop] = client
        return client

    async def topic(self, name: str) -> topics_module.Topic | None:
        load = lambda: asyncio.to_thread(topics_module.load, self.app.backend, name)  # noqa: E731
        found: topics_module.Topic | None = await self.topics.get(name, load)
        return found

    async def __call__(self, topic: str, body: Any = None, ttr: float | None = None) -> dict[str, Any]:
        found = await self.topic(topic)
        if found is None:
            raise UnknownTopic(f"topic {topic!r} does not exist (deleted?)")
        running = current_job()
        job = running.job if running is not None else None
        attempt = job.attempts if job else 1
        payload = orjson.dumps(body)
        timeout = _http_timeout(found, ttr, job)
        headers = {
            "content-type": "application/json", "user-agent": USER_AGENT,
            "accept-encoding": "identity",
            "x-deferq-topic": found.name, "x-deferq-attempt": str(attempt),
            "x-deferq-job-id": job.id if job else "",
            **found.headers, **signing.sign(found.signing_secret, payload),
        }
        started = time.monotonic()
        status: int | None = None
        try:
            client = await self.client()
            request = client.build_request(found.method, found.url, content=payload,
                                           headers=headers, timeout=timeout)
            response = await client.send(request, stream=True)
            try:
                status = response.status_code
                failure = await self.decide(response, found)
            finally:
                await response.aclose()  # an answer not read to its end closes the connection
        except httpx.TimeoutException:
            failure = f"no answer within {timeout:g}s"
        except netpolicy.Refused as exc:
            failure = f"refused by the network policy: {exc}"
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
        )
        await self.count(found.name, decision, duration)
        if failure is not None:
            raise Retry(delay=delay, reason=f"attempt {attempt}: {failure}")
        return {"status": status, "attempt": attempt, "duration_ms": round(duration * 1000, 1)}

    @staticmethod
    async def decide(response: httpx.Response, topic: topics_module.Topic) -> str | None:
        """Why this answer fails the attempt, or None; reads at most the topic's cap."""
        if not 200 <= response.status_code < 300:
            return f"answered HTTP {response.status_code}"  # the body is not needed
        try:
            answer: bytes | Unreadable = await read_answer(response, topic.max_answer_bytes)
        except Unreadable as exc:
            answer = exc
        return judge(answer, topic.condition(), response.charset_encoding)

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


def topic_task(app: App, topic: topics_module.Topic) -> Task[..., Any]:
    """The delivery task (`install`) with `topic`'s settings as its defaults: a topic job
    is built by task.build_enqueue like any task's, so it takes every option a Python
    enqueue takes. Make it once per topic read: its resolution is kept on it."""
    known = app.tasks[TASK_NAME]
    defaults = replace(known.defaults, queue=topic.queue, priority=Priority.NAMES[topic.priority],
                       max_attempts=topic.max_attempts, timeout=topic.ttr + TIMEOUT_MARGIN)
    return Task(app, known.fn, TASK_NAME, defaults, options=JobOptions(delay=topic.delay_ms / 1000))


def topic_call(task: Task[..., Any], topic: str, body: Any, options: dict[str, Any]) -> Call:
    """A job of `topic` delivering `body`, with a request's options (by their Python
    names) over the topic's (`topic_task`). A ttr given is the delivery's HTTP timeout;
    the job's own timeout is TIMEOUT_MARGIN more, so the HTTP timeout fires first."""
    own = task.call(topic, body=body)
    if not options:  # the commonest request: the topic's own options, resolved once
        return own
    kwargs: dict[str, Any] = {"body": body}
    if (ttr := options.get("timeout")) is not None:
        kwargs["ttr"] = ttr
        options = {**options, "timeout": ttr + TIMEOUT_MARGIN}
    # the topic's delay, unless the request gives a due time or a delay of its own (0 too)
    delay = 0.0 if options.get("at") is not None else own.options.delay
    return Call(TASK_NAME, (topic,), kwargs, JobOptions(**{"delay": delay, **options}))


def install(app: App, alerts: AlerterSource | None = None) -> None:
    """Register the delivery task and the dead-letter alert on `app` (once)."""
    if TASK_NAME in app.tasks:
        return
    netpolicy.Policy.from_env()  # a malformed DEFERQ_CALLBACK_POLICY stops the process here
    destination = os.environ.get(DELIVERY_LOG_ENV)
    if destination:
        logfiles.route(logfiles.DELIVERY_LOG, destination)
    network = netpolicy.ForStore(lambda: app.url)  # neither callbacks nor alerts go into the store
    deliverer = Deliverer(app, network)

    async def deliver(topic: str, body: Any = None, ttr: float | None = None) -> dict[str, Any]:
        return await deliverer(topic, body, ttr)

    app.task(deliver, name=TASK_NAME, queue=topics_module.DEFAULT_QUEUE,
             max_attempts=topics_module.DEFAULT_MAX_ATTEMPTS,
             timeout=topics_module.DEFAULT_TTR + TIMEOUT_MARGIN)
    source = alerts or AlerterSource(lambda: app.backend, network)

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
