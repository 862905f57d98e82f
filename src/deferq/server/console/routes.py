"""The routes the operator console (/dashboard/) needs beyond api/routes.py, open to any API
client like the rest of /v1: who a token is, a bounded job search, a job's lease,
workers and masters, periodic schedules, the store's health, trying a retry condition or
a backoff before saving a topic, a test alert, retrying chosen dead letters, and orders
to a worker (quiet, stop).

Everything here is built on what every store offers today (get, get_by_key, list_jobs,
retry_dead, ping, now, kv_*): no store-specific code. docs/http.md ("The console")
describes the routes; `paths()` is their part of the OpenAPI document.
"""

from __future__ import annotations

import asyncio
import functools
import re
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.routing import Route

from ...backends.base import Backend
from ...backoff import exponential
from ...errors import ConfigError
from ...job import ALL_STATES, Job, JobState
from ...limits.in_force import in_force
from ...net.policy import Policy
from ...schedules.timing import Timing
from ...supervisor.alerts import AlertConfig, Alerter
from ...supervisor.status import running_masters, worker_heartbeats, worker_view
from ...worker import orders
from ..api import jobs as jobs_module
from ..api import schedules as schedules_api
from ..api.openapi import answer, operation, path_param, query, ref
from ..api.routes import ADMIN, READER, Handler, by_method, caller, needs, store_route
from ..http import fields, settings
from ..http.errors import Invalid, not_found
from ..process.service import Service, store_error
from ..process.web import JSON, read_json, service_of
from ..topics.condition import Condition, ConditionError
from ..topics.delivery import TASK_NAME, judge
from ..topics.topic import schedule_of
from . import models as cm

PINGS = 3  # store round trips timed by GET /v1/store
TEST_ALERT_KIND = "test"
TEST_ALERT_SECONDS = 15.0  # how long POST /v1/settings/alerts/test waits for delivery
PASSWORD = re.compile(r"(//[^/@:]*:)[^/@]*@")


def redact(url: str) -> str:
    """A store URL without its password."""
    return PASSWORD.sub(r"\1***@", url)


def bearer(request: Request) -> str:
    return request.headers.get("authorization", "").partition(" ")[2].strip()


# -- who am I ----------------------------------------------------------------------------


@store_route(READER)
async def whoami(service: Service, request: Request) -> JSON:
    """The scope of the caller's token (any valid token passes the reader check)."""
    if not service.config.auth:
        return JSON({"auth": False, "scope": ADMIN})
    return JSON({"auth": True, "scope": await service.scope_of(bearer(request))})


# -- jobs --------------------------------------------------------------------------------


def _name(job: Job) -> str:
    """What a job runs: its task, or the topic of a callback delivery."""
    return str(job.args[0]) if job.task == TASK_NAME and job.args else job.task


@dataclass(frozen=True)
class Search:
    """What GET /v1/search looks for. `task` and `q` are matched without case, as parts
    of the task (or topic) name and of the id or key; `q` is also looked up exactly as
    an id and as a key, so one job is found however old it is."""

    states: tuple[JobState, ...]
    queue: str | None
    task: str
    q: str
    window: int

    def matches(self, job: Job) -> bool:
        if job.state not in self.states or (self.queue is not None and job.queue != self.queue):
            return False
        if self.task and self.task not in _name(job).lower():
            return False
        if not self.q:
            return True
        needle = self.q.lower()
        return needle in job.id.lower() or (job.key is not None and needle in job.key.lower())

    def run(self, backend: Backend) -> dict[str, Any]:
        exact: list[Job | None] = []
        if self.q:
            exact += [backend.get(job_id) for job_id in dict.fromkeys((self.q, self.q.upper()))]
            exact.append(backend.get_by_key(self.q))
        seen: dict[str, Job] = {job.id: job for job in exact if job is not None and self.matches(job)}
        scanned, complete, tasks = 0, True, set()
        for state in self.states:
            batch = backend.list_jobs(state, self.queue, self.window)
            scanned += len(batch)
            complete = complete and len(batch) < self.window
            for job in batch:
                tasks.add(_name(job))
                if job.id not in seen and self.matches(job):
                    seen[job.id] = job
        found = list(seen.values())
        if len(self.states) > 1:
            found.sort(key=lambda job: job.id, reverse=True)  # ids grow with creation time
        return {"found": found, "scanned": scanned, "complete": complete, "tasks": sorted(tasks)}


@store_route(READER)
async def search_jobs(service: Service, request: Request) -> JSON:
    """Jobs by state, queue, task and id/key text, over the newest `window` jobs of each
    state (the stores list jobs by state and queue only: a later store feature will
    search them all, with keyset pagination)."""
    asked = fields.parse_query(cm.SearchQuery, dict(request.query_params))
    search = Search(
        states=(JobState(asked.state),) if isinstance(asked.state, str) else ALL_STATES,
        queue=asked.queue or None if isinstance(asked.queue, str) else None,
        task=asked.task.strip().lower(),
        q=asked.q.strip(),
        window=asked.window,
    )
    result = await service.store(search.run, service.backend)
    found: list[Job] = result["found"]
    return JSON({
        "jobs": [jobs_module.view(job, service.sealer) for job in found[:asked.limit]], "matched": len(found),
        "scanned": result["scanned"], "window": search.window, "complete": result["complete"],
        "tasks": result["tasks"],
    })


def _lease(backend: Backend, job_id: str) -> dict[str, Any] | None:
    job = backend.get(job_id)
    if job is None:
        return None
    active = job.state == JobState.ACTIVE
    return {"id": job.id, "state": str(job.state), "worker": job.worker if active else None,
            "lease_until": job.lease_until if active else None, "now": backend.now()}


@store_route(READER)
async def job_lease(service: Service, job_id: str) -> JSON:
    """Who holds a running job, and until when (the store's clock)."""
    lease = await service.store(_lease, service.backend, job_id)
    if lease is None:
        raise not_found(f"job {job_id}")
    return JSON(lease)


def _retry_each(backend: Backend, ids: list[str]) -> dict[str, Any]:
    not_retried = [job_id for job_id in ids if not backend.retry_dead(job_id)]
    return {"retried": len(ids) - len(not_retried), "not_retried": not_retried}


@store_route(ADMIN)
async def retry_dead_batch(service: Service, request: Request) -> JSON:
    """Retry the dead letters named (those the console's filter matched); ids that are
    not dead (any more) are listed back."""
    asked = fields.parse(cm.RetryBatchRequest, await read_json(request), "the request")
    return JSON(await service.store(_retry_each, service.backend, list(dict.fromkeys(asked.ids))))


# -- workers, schedules, the store ---------------------------------------------------------


def _order(backend: Backend, kind: str, name: str, order: str, by: str) -> dict[str, Any] | None:
    """Leave `order` for the worker or master `name` if it sends heartbeats (kv "workers"
    or "masters"); None when none of that name does."""
    if backend.kv_get(f"{kind}s", name) is None:
        return None
    given = orders.give(backend, orders.master_key(name) if kind == "master" else name, order, by)
    return {**given, "worker": name}


async def give_order(request: Request, kind: str, order: str) -> JSON:
    service = service_of(request)
    name: str = request.path_params[kind]
    given = await service.store(_order, service.backend, kind, name, order, await caller(request))
    if given is None:
        raise not_found(f"{kind} {name} (none of that name sends heartbeats)")
    return JSON(given)


def order_route(kind: str, order: str, summary: str) -> Handler:
    """The admin route that leaves `order` for a worker or a master (give_order)."""

    async def handler(request: Request) -> JSON:
        return await give_order(request, kind, order)

    handler.__name__ = handler.__qualname__ = f"{order}_{kind}"
    handler.__doc__ = summary
    return needs(ADMIN)(handler)


# (kind, order, what it does): POST /v1/{kind}s/{name}/{order}
ORDERS = [
    ("worker", "quiet", "it takes no new job, finishes its running ones (within a heartbeat)"),
    ("worker", "stop", "it takes no new job, then exits once its running ones finish"),
    ("master", "quiet", "it orders its workers quiet and starts none (at its next check)"),
    ("master", "stop", "it stops as on SIGTERM: its workers finish their jobs, then all exit"),
]
ORDER_ROUTES = {f"/v1/{kind}s/{{{kind}}}/{order}": order_route(kind, order, what) for kind, order, what in ORDERS}


def _workers(backend: Backend) -> dict[str, Any]:
    now = time.time()
    masters = running_masters(backend)
    owner = {child.get("worker"): master.get("id") for master in masters
             for pool in master.get("pools", {}).values() for child in pool.get("children", [])}
    workers = []
    for status in worker_heartbeats(backend):
        view = worker_view(status, now)
        workers.append({**view, "master": owner.get(view["worker"]), "seen": status.get("seen")})
    running = [job for worker in workers for job in worker["jobs"]]
    for shown, job in zip(running, backend.get_many([job["id"] for job in running]), strict=True):
        if job is not None:  # what each task last reported
            shown.update(progress=job.progress, progress_message=job.progress_message)
    for master in masters:
        master["url"] = redact(str(master.get("url", "")))
        master["heartbeat_age"] = round(max(0.0, now - float(master.get("seen", now))), 1)
    return {"time": now, "workers": workers, "masters": masters}


@store_route(READER)
async def list_workers(service: Service) -> JSON:
    """Workers and masters from their heartbeat records (kv "workers" and "masters")."""
    return JSON(await service.store(_workers, service.backend))


def _plain(value: Any) -> Any:
    """A value as JSON would carry it (schedules are written in Python: anything goes)."""
    return orjson.loads(orjson.dumps(value, default=repr, option=orjson.OPT_NON_STR_KEYS))


def _periodic(service: Service) -> dict[str, Any]:
    now = service.backend.now()
    return {"now": now, **_plain(schedules_api.listing(service, now)),
            "masters": len(running_masters(service.backend))}


@needs(READER)
async def preview_cron(request: Request) -> JSON:
    """What a cron expression means: its next ticks on its zone's clock (the schedule
    form shows them as it is typed), or the sentence that refuses it."""
    trial = fields.parse(cm.CronTrial, await read_json(request), "the request")
    try:
        timing = Timing(trial.cron, tz=trial.tz)
        now = time.time()
        return JSON({"described": timing.describe(now), "next": timing.upcoming(now, 5)})
    except ConfigError as exc:
        raise Invalid(str(exc)) from None


@store_route(READER)
async def list_periodic(service: Service) -> JSON:
    """The store's schedules (from code, a master's config file or the API), with their
    next ticks, their last run and who fires them now."""
    return JSON(await service.store(_periodic, service))


def _limits(service: Service) -> dict[str, Any]:
    declared: dict[str, dict[str, Any]] = {}
    for status in worker_heartbeats(service.backend):
        declared.update(status.get("limits") or {})
    registry = service.app.registry  # a server started with --app knows its tasks too
    for name, limit in registry.limits.items():
        if name in registry.tasks:
            declared.setdefault(name, {**limit.to_dict(), "queue": registry.tasks[name].defaults.queue})
    return {"time": time.time(), "limits": in_force(service.backend, declared, set(registry.tasks))}


@store_route(READER)
async def limits_in_force(service: Service) -> JSON:
    """The limits in force: declared in code, set at run time, paused; with their use."""
    return JSON(await service.store(_limits, service))


def _store_health(service: Service) -> dict[str, Any]:
    url = service.app.url
    report: dict[str, Any] = {
        "kind": url.partition(":")[0], "url": redact(url), "backend": None, "up": False,
        "latency_ms": None, "pings_ms": [], "clock_skew_ms": None, "error": None,
    }
    try:
        backend = service.backend
        report["backend"] = type(backend).__name__
        pings, missing = [], []
        for _ in range(PINGS):
            started = time.perf_counter()
            missing = backend.check()  # up while any part answers (Redis shards): GET /v1/store/parts has each
            pings.append((time.perf_counter() - started) * 1000)
        if missing:
            report["error"] = f"part(s) {', '.join(missing)} cannot be reached; the others answer"
        before = time.time()
        store_now = backend.now()
        report["clock_skew_ms"] = round((store_now - (before + time.time()) / 2) * 1000, 1)
    except Exception as exc:
        failure = store_error(exc, service.config.retry_after)
        if failure is None:
            raise
        report["error"] = failure.message
        return report
    report.update(up=True, latency_ms=round(statistics.median(pings), 2), pings_ms=[round(p, 2) for p in pings])
    return report


@needs(READER)
async def store_health(request: Request) -> JSON:
    """The store's kind, URL (no password), whether it answers and how fast: 200 even
    when it is down (`up` says so), so a console can show why."""
    return JSON(await asyncio.to_thread(_store_health, service_of(request)))


# -- trying topic settings -------------------------------------------------------------------


@needs(READER)
async def evaluate_condition(request: Request) -> JSON:
    """Would a delivery that got this answer be retried? The worker's own judgement
    (delivery.judge): a status that is not 2xx, an empty answer, or a true condition."""
    trial = fields.parse(cm.ConditionTrial, await read_json(request), "the request")
    status = 200 if trial.status is None else trial.status
    try:
        condition = Condition(trial.condition) if trial.condition else None
    except ConditionError as exc:
        raise Invalid(f"condition: {exc}") from None
    if not 200 <= status < 300:
        return JSON({"retry": True, "reason": f"status {status} is not 2xx"})
    reason = judge(trial.answer.encode(), condition)
    return JSON({"retry": reason is not None, "reason": reason})


@needs(READER)
async def preview_backoff(request: Request) -> JSON:
    """The waits before each retry of a topic's backoff: with jitter, between
    `wait_min` and `wait`; `after` sums the longest waits (the first attempt at 0)."""
    trial = fields.parse(cm.BackoffTrial, await read_json(request), "the request")
    schedule = schedule_of(trial.backoff)
    attempts = 10 if trial.attempts is None else trial.attempts
    retries, after = [], 0.0
    for done in range(1, attempts):
        if isinstance(schedule, exponential):
            wait = schedule.nominal(done)
            low = wait / 2 if schedule.jitter else wait
        else:
            wait = low = float(schedule(done))
        after += wait
        retries.append({"attempt": done + 1, "wait": wait, "wait_min": low, "after": after})
    return JSON({"retries": retries})


# -- alerts ----------------------------------------------------------------------------------


async def _send_test_alert(config: AlertConfig, policy: Callable[[], Policy]) -> dict[str, Any]:
    """One alert to each target at once, each tried once; a status for each, in deferq's
    words (never what the other side answered: see alerts.failure)."""
    alerter = Alerter(config, source=f"deferq serve on {socket.gethostname()}", policy=policy)
    details = {"note": "sent on request, to check where alerts go"}

    async def status(target: str) -> str:
        attempt = asyncio.to_thread(alerter.try_once, target, TEST_ALERT_KIND,
                                    "test alert from the deferq console", details)
        try:
            return await asyncio.wait_for(attempt, TEST_ALERT_SECONDS)
        except TimeoutError:
            return f"connection failed: no answer within {TEST_ALERT_SECONDS:g}s"

    targets = list(alerter.targets())
    statuses = await asyncio.gather(*(status(target) for target in targets))
    results = [{"target": target, "delivered": said == "delivered", "status": said,
                "error": None if said == "delivered" else said}
               for target, said in zip(targets, statuses, strict=True)]
    sent = all(r["delivered"] for r in results)
    message = "delivered to every target" if sent else "not delivered to every target: see each one"
    return {"sent": sent, "targets": results, "message": message}


@store_route(ADMIN)
async def test_alert(service: Service) -> JSON:
    """Send one alert (kind "test") through the saved alert settings, and say for each
    target whether it arrived."""
    config = settings.check_alerts(await service.store(settings.load_alerts, service.backend))
    if not config.enabled:
        return JSON({"sent": False, "targets": [],
                     "message": "no alert target is set: save an e-mail or webhook target first"})
    return JSON(await _send_test_alert(config, service.network))


# -- routing and the OpenAPI document ------------------------------------------------------------


ROUTES: dict[str, dict[str, Handler]] = {
    "/v1/whoami": {"GET": whoami},
    "/v1/search": {"GET": search_jobs},
    "/v1/jobs/{job_id}/lease": {"GET": job_lease},
    "/v1/dead/retry-batch": {"POST": retry_dead_batch},
    "/v1/workers": {"GET": list_workers},
    **{path: {"POST": handler} for path, handler in ORDER_ROUTES.items()},
    "/v1/periodic": {"GET": list_periodic},
    "/v1/periodic/preview": {"POST": preview_cron},
    "/v1/stats/limits": {"GET": limits_in_force},
    "/v1/store": {"GET": store_health},
    "/v1/conditions/evaluate": {"POST": evaluate_condition},
    "/v1/backoff/preview": {"POST": preview_backoff},
    "/v1/settings/alerts/test": {"POST": test_alert},
}


def routes() -> list[Route]:
    return [Route(path, by_method(handlers, paths), methods=list(handlers)) for path, handlers in ROUTES.items()]


def route_scopes() -> dict[tuple[str, str], str]:
    """(method, path) -> the scope it needs, for the docs and the tests."""
    return {(method, path): handler.scope  # type: ignore[attr-defined]
            for path, handlers in ROUTES.items() for method, handler in handlers.items()}


@functools.cache
def paths() -> dict[str, Any]:
    """This module's part of /openapi.json (openapi.py adds it to its own); the schemas
    are console_models' (openapi.schemas)."""

    def ok(description: str, model: type) -> dict[str, Any]:
        return {"200": answer(description, ref(model.__name__))}

    def body(model: type) -> dict[str, Any]:
        return ref(model.__name__)

    return {
        "/v1/whoami": {"get": operation("The scope of the caller's token", "reader",
                                        ok("Who", cm.WhoAmI), errors=("503",))},
        "/v1/search": {"get": operation(
            "Jobs by state, queue, task and id/key text, over the newest jobs of each state", "reader",
            ok("Matches, newest first", cm.SearchAnswer), params=query(cm.SearchQuery), errors=("422", "503"))},
        "/v1/jobs/{job_id}/lease": {"get": operation(
            "Who holds a running job, until when", "reader", ok("The lease", cm.Lease),
            params=[path_param("job_id")])},
        "/v1/dead/retry-batch": {"post": operation(
            "Retry the dead letters named", "admin", ok("Retried", cm.RetriedBatch),
            body(cm.RetryBatchRequest), errors=("503",))},
        "/v1/workers": {"get": operation(
            "Workers and masters, from their heartbeats", "reader", ok("Workers", cm.Workers), errors=("503",))},
        **{f"/v1/{kind}s/{{{kind}}}/{order}": {"post": operation(
            f"{order.capitalize()} a {kind}: {what}", "admin", ok("Ordered", cm.WorkerOrder),
            params=[path_param(kind)], errors=("404", "503"))} for kind, order, what in ORDERS},
        "/v1/periodic": {"get": operation(
            "Periodic schedules: next ticks and the last one enqueued", "reader",
            ok("Schedules", cm.PeriodicSchedules), errors=("503",))},
        "/v1/periodic/preview": {"post": operation(
            "What a cron expression means: its next ticks, or why it is refused", "reader",
            ok("The next ticks", cm.CronPreview), body(cm.CronTrial), errors=())},
        "/v1/stats/limits": {"get": operation(
            "The limits in force (declared, set at run time, paused) with the slots held and runs a second",
            "reader", ok("Limits", cm.LimitsInForce), errors=("503",))},
        "/v1/store": {"get": operation(
            "The store: kind, URL without password, up or down, ping latency", "reader",
            ok("The store", cm.StoreHealth), errors=())},
        "/v1/conditions/evaluate": {"post": operation(
            "Would this answer be retried? A retry condition tried on a sample answer", "reader",
            ok("The verdict", cm.Verdict), body(cm.ConditionTrial), errors=())},
        "/v1/backoff/preview": {"post": operation(
            "The waits before each retry of a backoff", "reader", ok("Waits", cm.BackoffPreview),
            body(cm.BackoffTrial), errors=())},
        "/v1/settings/alerts/test": {"post": operation(
            "Send a test alert through the saved alert settings", "admin", ok("What arrived", cm.TestAlert),
            errors=("422", "503"))},
    }
