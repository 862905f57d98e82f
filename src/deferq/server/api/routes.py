"""The REST API v1. Each handler names the scope it needs; docs/http.md describes them."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import UNSET
from starlette.requests import Request
from starlette.routing import Route

from ...backends.base import Backend, missing_from, queue_table
from ...errors import ConfigError
from ...flows import batch as batches
from ...job import Job, JobState
from ...limits.runtime import LimitsAdmin, Override, limit_name
from ...options import MAX_REMARK, queue_name
from ...steps import events as step_events
from ...steps import retry as step_retry
from ...steps.cancels import after_cancelled
from ..http import auth, fields, settings
from ..http.errors import ApiError, Invalid, not_found
from ..process.web import JSON, authorize, read_json, service_of, wait_holder
from ..topics import topic as topics_module
from . import job_search, models
from . import jobs as jobs_module
from . import shards as shards_api
from .openapi import document
from .store_parts import store_parts

if TYPE_CHECKING:
    from ..process.service import Service

Handler = Callable[[Request], Awaitable[JSON]]
READER, PRODUCER, ADMIN = "reader", "producer", "admin"


def needs(scope: str) -> Callable[[Handler], Handler]:
    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def guarded(request: Request) -> JSON:
            await authorize(request, scope)
            return await handler(request)

        guarded.scope = scope  # type: ignore[attr-defined]
        return guarded

    return wrap


def store_route(scope: str) -> Callable[[Callable[..., Awaitable[JSON]]], Handler]:
    """`needs(scope)` for a handler of the store's records: it is called with what its
    parameters name: `service` (the request's), `request`, and the route's path
    parameters (`job_id`, `name`, ...), so that no handler fetches them by hand."""

    def wrap(handler: Callable[..., Awaitable[JSON]]) -> Handler:
        names = tuple(inspect.signature(handler).parameters)

        @needs(scope)
        @functools.wraps(handler)
        async def route(request: Request) -> JSON:
            given = {"service": service_of(request), "request": request}
            return await handler(**{name: given[name] if name in given else _path(request, name)
                                    for name in names})

        return route

    return wrap


def _path(request: Request, name: str) -> str:
    value: str = request.path_params[name]
    return value


async def refusal(service: Service, job_id: str, code: str, rule: str) -> ApiError:
    """Why an action on a job did not apply: 404 when there is no such job, else 409."""
    job = await service.store(service.backend.get, job_id)
    if job is None:
        return not_found(f"job {job_id}")
    return ApiError(409, code, f"job {job_id} is {job.state}: {rule}")


# -- jobs ------------------------------------------------------------------------------


async def enqueue_job(service: Service, data: Any) -> tuple[int, dict[str, Any]]:
    """POST /v1/jobs after auth: 201 and a receipt (200 when its key matched a waiting
    job). Shared by the route below and the fast lane in app.py."""
    item = await jobs_module.parse_job(service, data)
    await service.queue_lengths.check(item.job.queue, 1)
    job = (await service.enqueue([item]))[0]
    return (201 if service.backend.is_new(item, job) else 200), jobs_module.receipt(job)


@needs(PRODUCER)
async def create_job(request: Request) -> JSON:
    status, receipt = await enqueue_job(service_of(request), await read_json(request))
    return JSON(receipt, status)


@store_route(PRODUCER)
async def create_jobs(service: Service, request: Request) -> JSON:
    data = await read_json(request)
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise Invalid('send {"jobs": [job, ...]}')
    if not 1 <= len(data["jobs"]) <= service.config.max_batch:
        raise Invalid(f"jobs must hold 1 to {service.config.max_batch} jobs")
    batch = fields.parse(models.BatchRequest, data, "a batch")
    items = []
    for i, job in enumerate(batch.jobs):
        try:
            items.append(await jobs_module.parse_job(service, job))
        except ApiError as exc:  # a 422, or a 404 for a topic that does not exist
            raise ApiError(exc.status, exc.code, f"jobs[{i}]: {exc.message}") from None
    per_queue: dict[str, int] = {}
    for item in items:
        per_queue[item.job.queue] = per_queue.get(item.job.queue, 0) + 1
    for queue, count in per_queue.items():
        await service.queue_lengths.check(queue, count)
    stored = await service.enqueue(items)
    return JSON({"jobs": [jobs_module.receipt(job) for job in stored]}, 201)


@store_route(READER)
async def get_job(service: Service, request: Request, job_id: str) -> JSON:
    wait = fields.parse_query(models.JobQuery, dict(request.query_params)).wait
    if wait:
        holder, who = wait_holder(request)
        job = await service.waits.wait_finished(job_id, float(wait), holder, who)
    else:
        job = await service.store(service.backend.get, job_id)
    if job is None:
        raise not_found(f"job {job_id}")
    sealer = service.sealer
    links = await service.store(jobs_module.workflow, service.backend, job, sealer)
    return JSON({**jobs_module.view(job, sealer), **links})


@store_route(READER)
async def get_batch(service: Service, request: Request, batch_id: str) -> JSON:
    shown = fields.parse_query(models.BatchQuery, dict(request.query_params)).members
    found = await service.store(batch_with_members, service.backend, batch_id, shown)
    if found is None:
        raise not_found(f"batch {batch_id}")
    return JSON(found)


def batch_with_members(backend: Backend, batch_id: str, shown: int) -> dict[str, Any] | None:
    """A batch's counts, callbacks and its first `shown` members with their states."""
    found = batches.info(backend, batch_id)
    record = batches.record_of(backend, batch_id)
    if found is None or record is None:
        return None
    return {**found.to_dict(), "members": jobs_module.links(backend, record["members"], shown)}


@store_route(READER)
async def list_jobs(service: Service, request: Request) -> JSON:
    """The filters combine: the job with `key`, if it is in `state` and of `queue`; else a
    page of the jobs in `state`, of `queue` and `task`, of a chunk call, matching `q`
    (job_search.py)."""
    query = fields.parse_query(models.JobsQuery, dict(request.query_params))
    queue = None if query.queue is UNSET else query.queue
    if query.key is not UNSET:
        job = await service.store(service.backend.get_by_key, query.key)
        found = [job] if job is not None else []
        found = [j for j in found if query.state in (UNSET, str(j.state)) and queue in (None, j.queue)
                 and query.tag in (UNSET, *j.tags) and query.chunk in (UNSET, j.chunk_call)]
        return JSON({"jobs": [jobs_module.view(job, service.sealer) for job in found]})
    return JSON(await job_search.page(service, query))


async def jobs_in_state(request: Request, state: JobState, queue: str | None, limit: int) -> JSON:
    service = service_of(request)
    found = await service.store(service.backend.list_jobs, state, queue, limit)
    return JSON({"jobs": [jobs_module.view(job, service.sealer) for job in found]})


async def act_on_job(request: Request, action: str, state: str, code: str, rule: str) -> JSON:
    """Act on one job (retry a dead one): its new state, else why not (404 or 409)."""
    service = service_of(request)
    job_id = _path(request, "job_id")
    if await service.store(getattr(service.backend, action), job_id):
        return JSON({"id": job_id, "state": state})
    raise await refusal(service, job_id, code, rule)


def cancelled_remark(job: Job, who: str, query: models.CancelQuery, now: float) -> str:
    """The line a cancel with a reason or a source adds before the job's remark."""
    when = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    via = "" if query.via is UNSET else f" from the {query.via}"
    reason = "" if query.reason is UNSET or not query.reason.strip() else f": {query.reason.strip()}"
    line = f"Cancelled {when} by {who}{via}{reason}"
    return (line + (f"\n{job.remark}" if job.remark else ""))[:MAX_REMARK]


def stop_or_cancel(backend: Backend, job_id: str, who: str, query: models.CancelQuery) -> Job | None:
    """Cancel a waiting job or ask a running one to stop, recording who and why in its
    remark when asked with a reason or a source: the job as it stands, None if refused.
    Its unfinished child jobs (`job.gather`) are cancelled too."""
    before = backend.get(job_id)
    if before is None or not backend.cancel(job_id):
        return None
    after_cancelled(backend, job_id)  # its children cancelled; a durable job's undo handlers run
    if query.reason is not UNSET or query.via is not UNSET:
        backend.set_remark(job_id, cancelled_remark(before, who, query, backend.now()))
    return backend.get(job_id)


async def caller(request: Request) -> str:
    """Who calls, in words for a remark: the token's id and note, or its absence."""
    service = service_of(request)
    if not service.config.auth:
        return "a caller without a token (auth is off)"
    record = await service.store(auth.record_of, service.backend, request.headers.get("authorization", "")
                                 .partition(" ")[2].strip())
    if record is None:
        return "an unknown token"
    return f"token {record['id']}" + (f" ({record['note']})" if record.get("note") else "")


@store_route(PRODUCER)
async def cancel_job(service: Service, request: Request, job_id: str) -> JSON:
    """A waiting job is cancelled (200); an active one is asked to stop (202): it ends
    cancelled once its worker hears it, at its next heartbeat. With `reason` or `via`,
    who cancelled it, when and why go before its remark."""
    query = fields.parse_query(models.CancelQuery, dict(request.query_params))
    job = await service.store(stop_or_cancel, service.backend, job_id, await caller(request), query)
    if job is None:
        raise await refusal(service, job_id, "not_cancellable", "finished jobs cannot be cancelled")
    if job.state == JobState.ACTIVE:
        return JSON({"id": job_id, "state": str(job.state), "cancel_requested": True}, 202)
    service.app.history.count(job.queue, job.task, "cancelled")  # a running one: when its worker settles it
    return JSON({"id": job_id, "state": "cancelled"})


@needs(PRODUCER)
async def run_now(request: Request) -> JSON:
    """A scheduled job (delayed, or waiting for its next retry) becomes due now."""
    return await act_on_job(request, "run_now", "queued", "not_scheduled",
                            "only scheduled jobs (delayed or retrying) can be run now")


def _cancel_each(backend: Backend, ids: list[str], who: str, query: models.CancelQuery) -> dict[str, Any]:
    cancelled, stopping, refused = 0, 0, []
    for job_id in ids:
        job = stop_or_cancel(backend, job_id, who, query)
        if job is None:
            refused.append(job_id)
        elif job.state == JobState.ACTIVE:
            stopping += 1
        else:
            cancelled += 1
    return {"cancelled": cancelled, "stopping": stopping, "not_cancelled": refused}


@store_route(PRODUCER)
async def cancel_batch(service: Service, request: Request) -> JSON:
    """Cancel the waiting jobs named and ask the running ones to stop (the console's
    selection); who, when and why go before each one's remark."""
    asked = fields.parse(models.CancelBatchRequest, await read_json(request), "the request")
    query = models.CancelQuery(reason=asked.reason or UNSET, via="console")
    return JSON(await service.store(_cancel_each, service.backend, list(dict.fromkeys(asked.ids)),
                                    await caller(request), query))


def _delete_each(backend: Backend, ids: list[str]) -> dict[str, Any]:
    not_deleted = [job_id for job_id in ids if not backend.delete(job_id)]
    return {"deleted": len(ids) - len(not_deleted), "not_deleted": not_deleted}


@store_route(ADMIN)
async def delete_batch(service: Service, request: Request) -> JSON:
    """Delete the finished jobs named (succeeded, dead, cancelled) for good; the others
    are listed back."""
    asked = fields.parse(models.IdsRequest, await read_json(request), "the request")
    return JSON(await service.store(_delete_each, service.backend, list(dict.fromkeys(asked.ids))))


# -- queues and dead letters -------------------------------------------------------------


@store_route(READER)
async def list_queues(service: Service) -> JSON:
    stats = await service.store(queue_table, service.backend)
    # missing: parts of the store (Redis shards) that did not answer; their jobs are not counted
    return JSON({"queues": {name: s.to_dict() for name, s in sorted(stats.items())},
                 "missing": missing_from(stats)})


async def set_paused(request: Request, paused: bool) -> JSON:
    service = service_of(request)
    try:
        queue = queue_name(_path(request, "queue"))
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    changed = await service.store(service.backend.pause if paused else service.backend.resume, queue)
    return JSON({"queue": queue, "paused": paused, "changed": changed})


@needs(ADMIN)
async def pause_queue(request: Request) -> JSON:
    """Workers stop taking the queue's jobs (enqueues go on; running jobs finish)."""
    return await set_paused(request, True)


@needs(ADMIN)
async def resume_queue(request: Request) -> JSON:
    return await set_paused(request, False)


def _limit_name(name: str) -> str:
    try:
        return limit_name(name)
    except ConfigError as exc:
        raise Invalid(str(exc)) from None


@store_route(READER)
async def list_limits(service: Service) -> JSON:
    return JSON({"limits": await service.store(LimitsAdmin(lambda: service.backend).list)})


@store_route(ADMIN)
async def put_limit(service: Service, request: Request, name: str) -> JSON:
    """Set a limit (and pause it with `pause_s`); every worker holds it within a second."""
    name = _limit_name(name)
    asked = fields.parse(models.LimitRequest, await read_json(request), "a limit")
    limits = LimitsAdmin(lambda: service.backend)
    setting = None
    try:  # checked here: the store is asked only for a limit it can keep
        if asked.rate is not None or asked.concurrency is not None:
            setting = Override.parse(asked.rate, asked.concurrency)
    except ConfigError as exc:
        raise Invalid(str(exc)) from None

    def apply() -> dict[str, Any] | None:
        if setting is not None:
            limits.set(name, rate=setting.rate, concurrency=setting.concurrency)
        if asked.pause_s is not None:
            limits.pause(name, asked.pause_s)
        return limits.get(name)

    answer = await service.store(apply)
    return JSON(answer or {"rate": None, "concurrency": None, "paused_for": None})


@store_route(ADMIN)
async def delete_limit(service: Service, name: str) -> JSON:
    name = _limit_name(name)
    if not await service.store(LimitsAdmin(lambda: service.backend).clear, name):
        raise not_found(f"limit {name!r}")
    return JSON({"deleted": name})


@store_route(ADMIN)
async def resume_limit(service: Service, name: str) -> JSON:
    """End a limit's pause now, keeping the limit set on it; 404 when it is not paused."""
    name = _limit_name(name)
    limits = LimitsAdmin(lambda: service.backend)

    def resume() -> dict[str, Any] | None:
        return (limits.get(name) or {"rate": None, "concurrency": None, "paused_for": None}) \
            if limits.resume(name) else None

    answer = await service.store(resume)
    if answer is None:
        raise ApiError(404, "not_found", f"limit {name!r:.200} is not paused")
    return JSON(answer)


@store_route(ADMIN)
async def set_remark(service: Service, request: Request, job_id: str) -> JSON:
    remark = fields.parse(models.RemarkRequest, await read_json(request), "the remark").remark
    if not await service.store(service.backend.set_remark, job_id, remark):
        raise not_found(f"job {job_id}")
    return JSON({"id": job_id, "remark": remark})


@store_route(ADMIN)
async def retry_from(service: Service, request: Request, job_id: str) -> JSON:
    """Run a finished durable job again from one of its steps (docs/steps.md)."""
    step = fields.parse(models.RetryFromRequest, await read_json(request), "the request").step
    try:
        job = await service.store(step_retry.retry_from, service.backend, job_id, step)
    except ConfigError as exc:  # a step name no job can have
        raise Invalid(str(exc)) from None
    except step_retry.RetryRefused as exc:
        if exc.reason == "unknown job":
            raise not_found(f"job {job_id}") from None
        status = 409 if exc.reason == "unfinished" else 422
        raise ApiError(status, exc.reason.replace(" ", "_"), str(exc)) from None
    return JSON({"id": job.id, "state": str(job.state)})


@store_route(PRODUCER)
async def send_event(service: Service, request: Request) -> JSON:
    sent = fields.parse(models.EventRequest, await read_json(request), "the event")
    try:  # the schema's patterns let a trailing newline through ($ matches before one)
        step_events.checked_event(sent.event, sent.key, sent.keep)
    except ConfigError as exc:
        raise Invalid(str(exc)) from None
    woken = await service.store(step_events.send_event, service.backend, sent.event, sent.key, sent.data,
                                sent.keep, service.sealer)
    return JSON({"event": sent.event, "key": sent.key, "woken": woken})


@store_route(READER)
async def list_events(service: Service) -> JSON:
    return JSON({"events": await service.store(step_events.kept_events, service.backend, service.sealer)})


def _delete_dead(backend: Backend, ids: list[str]) -> dict[str, Any]:
    """Delete the dead letters among `ids` (a job retried meanwhile is kept)."""
    not_deleted = []
    for job_id in ids:
        job = backend.get(job_id)
        if job is None or job.state != JobState.DEAD or not backend.delete(job_id):
            not_deleted.append(job_id)
    return {"deleted": len(ids) - len(not_deleted), "not_deleted": not_deleted}


@store_route(ADMIN)
async def delete_dead_batch(service: Service, request: Request) -> JSON:
    """Delete the dead letters named (those a console filter matched) for good."""
    ids = fields.parse(models.IdsRequest, await read_json(request), "the request").ids
    return JSON(await service.store(_delete_dead, service.backend, list(dict.fromkeys(ids))))


@needs(ADMIN)
async def list_dead(request: Request) -> JSON:
    query = fields.parse_query(models.DeadQuery, dict(request.query_params))
    return await jobs_in_state(request, JobState.DEAD, None if query.queue is UNSET else query.queue, query.limit)


@needs(ADMIN)
async def retry_dead(request: Request) -> JSON:
    return await act_on_job(request, "retry_dead", "queued", "not_dead",
                            "only dead jobs can be retried")


@store_route(ADMIN)
async def retry_all_dead(service: Service, request: Request) -> JSON:
    query = fields.parse_query(models.QueueQuery, dict(request.query_params))
    queue = None if query.queue is UNSET else query.queue
    retried = 0
    while batch := await service.store(service.backend.list_jobs, JobState.DEAD, queue, 500):
        done = sum([await service.store(service.backend.retry_dead, job.id) for job in batch])
        retried += done
        if not done:
            break
    return JSON({"retried": retried})


@store_route(ADMIN)
async def purge_dead(service: Service, request: Request) -> JSON:
    older_than = fields.parse_query(models.PurgeQuery, dict(request.query_params)).older_than
    purged = await service.store(service.backend.purge, [JobState.DEAD], float(older_than))
    return JSON({"purged": purged})


# -- topics ------------------------------------------------------------------------------


@store_route(ADMIN)
async def list_topics(service: Service) -> JSON:
    found = await service.store(topics_module.load_all, service.backend)
    return JSON({"topics": [topic.to_dict() for topic in found]})


@store_route(ADMIN)
async def get_topic(service: Service, name: str) -> JSON:
    topic = await service.store(topics_module.load, service.backend, name)
    if topic is None:
        raise not_found(f"topic {name!r}")
    return JSON(topic.to_dict())


@store_route(ADMIN)
async def put_topic(service: Service, request: Request, name: str) -> JSON:
    topics_module.check_name(name)
    data = await read_json(request)
    previous = await service.store(topics_module.load, service.backend, name)
    topic = topics_module.Topic.from_request(name, data, previous, service.network())
    await service.store(topics_module.save, service.backend, topic)
    service.forget_topic(name)
    return JSON(topic.to_dict(), 200 if previous else 201)


@store_route(ADMIN)
async def delete_topic(service: Service, name: str) -> JSON:
    if not await service.store(topics_module.delete, service.backend, name):
        raise not_found(f"topic {name!r}")
    service.forget_topic(name)
    return JSON({"deleted": name})


# -- tokens and settings -------------------------------------------------------------------


@store_route(ADMIN)
async def list_tokens(service: Service) -> JSON:
    return JSON({"tokens": await service.store(auth.list_tokens, service.backend)})


@store_route(ADMIN)
async def create_token(service: Service, request: Request) -> JSON:
    data = await read_json(request)
    if not isinstance(data, dict) or data.get("scope") not in auth.SCOPES:
        raise Invalid('send {"scope": "producer" or "admin", "note": "..."}')
    asked = fields.parse(models.TokenRequest, data, "a token request")
    token, record = await service.store(auth.create, service.backend, asked.scope, asked.note or "")
    return JSON({"token": token, **record}, 201)


@store_route(ADMIN)
async def delete_token(service: Service, token_id: str) -> JSON:
    if not await service.store(auth.revoke, service.backend, token_id):
        raise not_found(f"token {token_id}")
    return JSON({"deleted": token_id})


@store_route(ADMIN)
async def get_alerts(service: Service) -> JSON:
    return JSON({"alerts": await service.store(settings.load_alerts, service.backend)})


@store_route(ADMIN)
async def put_alerts(service: Service, request: Request) -> JSON:
    # as the model reads them (a whole number sent as 5.0 is 5), then as the alerter does
    data = msgspec.to_builtins(fields.parse(models.AlertSettings, await read_json(request), "the alert settings"))
    settings.check_alerts(data)
    await service.store(settings.save_alerts, service.backend, data)
    return JSON({"alerts": data})


@store_route(READER)
async def list_store_parts(service: Service) -> JSON:
    """Each part of the store (every Redis shard) up or down: 200 even when one is down."""
    return JSON(await asyncio.to_thread(store_parts, service.backend))


@store_route(READER)
async def list_shards(service: Service) -> JSON:
    return JSON(await service.store(shards_api.described, service.backend))


@store_route(ADMIN)
async def add_shard(service: Service, request: Request) -> JSON:
    asked = fields.parse(models.ShardRequest, await read_json(request), "a shard")
    who = await caller(request)
    return JSON(await shards_api.changed(service, shards_api.add_shard, asked.server, who), 201)


def shard_action(change: shards_api.Change) -> Handler:
    @store_route(ADMIN)
    async def act(service: Service, request: Request, number: str) -> JSON:
        return JSON(await shards_api.changed(service, change, number, await caller(request)))

    act.__name__ = change.__name__
    return act


# -- health ----------------------------------------------------------------------------


async def healthz(request: Request) -> JSON:
    return JSON({"status": "ok"})


async def readyz(request: Request) -> JSON:
    """Ready while any part of the store answers (503 when none does); `missing`, only
    when some do not (Redis shards), names them: their jobs wait for them."""
    service = service_of(request)
    missing = await service.store(service.backend.check)
    return JSON({"status": "ready", "missing": missing} if missing else {"status": "ready"})


ROUTES: dict[str, dict[str, Handler]] = {
    "/v1/jobs": {"POST": create_job, "GET": list_jobs},
    "/v1/jobs/batch": {"POST": create_jobs},
    "/v1/jobs/cancel-batch": {"POST": cancel_batch},
    "/v1/jobs/delete-batch": {"POST": delete_batch},
    "/v1/jobs/{job_id}": {"GET": get_job, "DELETE": cancel_job},
    "/v1/batches/{batch_id}": {"GET": get_batch},
    "/v1/jobs/{job_id}/remark": {"PUT": set_remark},
    "/v1/jobs/{job_id}/run-now": {"POST": run_now},
    "/v1/jobs/{job_id}/retry-from": {"POST": retry_from},
    "/v1/events": {"POST": send_event, "GET": list_events},
    "/v1/queues": {"GET": list_queues},
    "/v1/queues/{queue}/pause": {"POST": pause_queue},
    "/v1/queues/{queue}/resume": {"POST": resume_queue},
    "/v1/limits": {"GET": list_limits},
    "/v1/limits/{name}": {"PUT": put_limit, "DELETE": delete_limit},
    "/v1/limits/{name}/resume": {"POST": resume_limit},
    "/v1/dead": {"GET": list_dead, "DELETE": purge_dead},
    "/v1/dead/retry": {"POST": retry_all_dead},
    "/v1/dead/delete-batch": {"POST": delete_dead_batch},
    "/v1/dead/{job_id}/retry": {"POST": retry_dead},
    "/v1/topics": {"GET": list_topics},
    "/v1/topics/{name}": {"GET": get_topic, "PUT": put_topic, "DELETE": delete_topic},
    "/v1/tokens": {"GET": list_tokens, "POST": create_token},
    "/v1/tokens/{token_id}": {"DELETE": delete_token},
    "/v1/settings/alerts": {"GET": get_alerts, "PUT": put_alerts},
    "/v1/store/parts": {"GET": list_store_parts},
    "/v1/store/shards": {"GET": list_shards, "POST": add_shard},
    "/v1/store/shards/{number}": {"DELETE": shard_action(shards_api.remove_shard)},
    "/v1/store/shards/{number}/drain": {"POST": shard_action(shards_api.drain_shard)},
    "/v1/store/shards/{number}/undrain": {"POST": shard_action(shards_api.undrain)},
    "/healthz": {"GET": healthz},
    "/readyz": {"GET": readyz},
}


def by_method(handlers: dict[str, Handler], described: Callable[[], dict[str, Any]] | None = None) -> Handler:
    """One endpoint per path, so a wrong method's 405 lists every allowed one. Query
    parameters the path's OpenAPI operations (`described()`, the API's document by
    default) do not name are refused: the document is the one list."""
    allowed_by_method: dict[str, frozenset[str]] = {}

    async def dispatch(request: Request) -> JSON:
        method = request.method if request.method != "HEAD" else "GET"
        handler = handlers[method]
        request.scope["endpoint"] = handler  # names the route in metrics and the request log
        allowed = allowed_by_method.get(method)
        if allowed is None:
            operations = (described or _api_paths)()[request.scope["route"].path]
            parameters = operations[method.lower()].get("parameters", ())
            allowed = allowed_by_method[method] = frozenset(p["name"] for p in parameters if p["in"] == "query")
        unknown = sorted(set(request.query_params) - allowed)
        if unknown:
            raise Invalid(f"unknown query parameter {unknown[0]!r}"
                          + (f": this route takes {', '.join(sorted(allowed))}" if allowed else ""))
        return await handler(request)

    return dispatch


def _api_paths() -> dict[str, Any]:
    paths: dict[str, Any] = document()["paths"]
    return paths


def api_routes() -> list[Route]:
    return [Route(path, by_method(handlers), methods=list(handlers))
            for path, handlers in ROUTES.items()]


def route_scopes() -> dict[tuple[str, str], str | None]:
    """(method, path) -> the scope it needs (None: open), for the docs and the tests."""
    return {(method, path): getattr(handler, "scope", None)
            for path, handlers in ROUTES.items() for method, handler in handlers.items()}
