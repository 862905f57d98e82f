"""Job requests and views: what POST /v1/jobs accepts, and how a job is shown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...backends.base import Enqueue
from ...encryption.jobs import Sealer, for_display, shown_text
from ...errors import StoreUnavailable
from ...flows import batch as batches
from ...flows.batch import BATCH_OF, MEMBER_OF
from ...job import HTTP_FIELDS, Job, JobState
from ...observe import attempts
from ...options import HTTP_OPTIONS, JobOptions
from ...steps import children as child_jobs
from ...steps.events import timeline, waiting_for
from ...task import AFTER, CHILDREN, Call, build_enqueue
from ..http import fields
from ..http.errors import ApiError, Invalid
from ..topics.delivery import TASK_NAME, TIMEOUT_MARGIN, topic_call
from . import models

if TYPE_CHECKING:
    from ..process.service import Service

# The request's own fields, then every job option the HTTP API takes (deferq.options).
JOB_FIELDS = ("topic", "task", "body", "args", "kwargs", *HTTP_OPTIONS)
TOPIC_ONLY = ("body",)
TASK_ONLY = ("args", "kwargs", *models.TOPIC_DECIDES)
SCALED = frozenset(name for name, (_, spec) in HTTP_OPTIONS.items() if spec.http_scale != 1)


async def parse_job(service: Service, data: Any, where: str = "the job") -> Enqueue:
    """A job request as the store's Enqueue; a problem is one sentence (422), a topic
    that does not exist a 404. The rules between fields (one of topic or task, the fields
    of each kind, one due time) are the ones models.JOB_REQUEST and ONE_DUE_TIME state."""
    data = fields.json_object(data, where)
    is_topic = "topic" in data
    if is_topic == ("task" in data):
        raise Invalid(f"{where} needs exactly one of topic (a callback) or task (a Python task)")
    for name in TASK_ONLY if is_topic else TOPIC_ONLY:
        if name in data:
            raise Invalid(f"{name} is for task jobs; a topic job sends its body" if is_topic
                          else f"{name} is for topic jobs; a task job takes args and kwargs")
    if "delay_ms" in data and "at" in data:
        raise Invalid(f"{where} gives both delay_ms and at: give one")
    request: Any = fields.parse(models.TopicJob if is_topic else models.TaskJob, data, where, _explain)
    options = option_values(request)
    if is_topic:
        task = await service.topic_task(request.topic)
        if task is None:
            raise ApiError(404, "not_found", f"topic {request.topic!r:.100} does not exist: "
                           "create it with PUT /v1/topics/{name}")
        call = topic_call(task, request.topic, request.body, options)
    else:
        task = service.app.tasks.get(request.task)
        call = Call(request.task, tuple(request.args or ()), request.kwargs or {}, JobOptions(**options))
    try:  # as App.enqueue builds it: the same defaults, options and checks
        return build_enqueue(call, task, 0.0, service.app.durable, fair_queues=service.app.fair_queues)
    except (TypeError, ValueError) as exc:
        raise Invalid(str(exc)) from None


def option_values(request: Any) -> dict[str, Any]:
    """The job options a request sets, by their Python names, converted by their checks
    (the model has checked each against its schema; a check refuses what no schema says)."""
    values = {}
    for http_name, (name, spec) in HTTP_OPTIONS.items():
        value = getattr(request, http_name, None)
        if value is None:
            continue
        try:
            values[name] = spec.check(value * spec.http_scale if spec.http_scale != 1 else value, http_name)
        except ValueError as exc:
            raise Invalid(str(exc)) from None
    return values


def _explain(field: str, value: Any) -> str | None:
    """A refused option in its check's words, which say more than the schema's; not for a
    scaled option (delay_ms), whose check speaks of seconds. A refused task name: its rule."""
    if field == "task":
        return "task must be the name of your task (1-200 characters, not deferq.*)"
    option = HTTP_OPTIONS.get(field)
    if option is None or field in SCALED:
        return None
    try:
        option[1].check(value, field)
    except (ValueError, TypeError) as exc:
        return str(exc)
    return None


def receipt(job: Job) -> dict[str, Any]:
    """What POST /v1/jobs answers: enough to find the job again."""
    return {"id": job.id, "state": str(job.state), "run_at": job.run_at}


SHOWN_LINKS = 50  # parents and children a job page lists, at most


def workflow(store: Any, job: Job, sealer: Sealer | None = None) -> dict[str, Any]:
    """A job's place in a workflow, for GET /v1/jobs/{id}: `after` and `waiting` (ids),
    `parents` and `children` with their states, and its `batch`. Reads the store (one
    look-up per job listed): call it in a store thread."""
    after = list(job.meta.get(AFTER, ()))
    waiting = store.dependents(job.id)
    batch = _batch_of(store, job)
    children = [*job.meta.get(CHILDREN, ()), *waiting]
    if batch is not None and batch["role"] == "member":
        children += batch["callbacks"].values()
    steps = _steps(store, job, sealer)
    if any(step["kind"] == child_jobs.KIND for step in steps or ()):  # its child jobs (job.gather)
        children += child_jobs.child_ids(store, job.id, SHOWN_LINKS)
    parent = child_jobs.place_of(job)  # the job that started it as a child, if one did
    tried = attempts.read(store, job.id) if job.error is not None or job.attempts > 1 else []
    for attempt in tried:
        attempt["error"] = shown_text(attempt.get("error"), job.id, "error", sealer)
    return {"after": after, "waiting": waiting, "parents": links(store, [parent["id"]] if parent else after),
            "children": links(store, list(dict.fromkeys(children))), "batch": batch,
            "steps": steps, "waiting_for": waiting_for(job, steps or []) or _waits(job), "attempt_log": tried}


def _steps(store: Any, job: Job, sealer: Sealer | None = None) -> list[dict[str, Any]] | None:
    """The job's durable steps; None when the part of the store that keeps them does not
    answer (a Redis shard): the job's page still shows the job."""
    try:
        return timeline(store, job.id, sealer)
    except StoreUnavailable:
        return None


def links(store: Any, ids: list[str], shown: int = SHOWN_LINKS) -> list[dict[str, Any]]:
    """The first `shown` of `ids`, each with its state, task and queue (null: purged)."""
    found = []
    for job_id, other in zip(ids[:shown], store.get_many(ids[:shown]), strict=True):
        found.append({"id": job_id, "state": str(other.state) if other else None,
                      "task": (other.args[0] if other.task == TASK_NAME and other.args else other.task)
                      if other else None, "queue": other.queue if other else None})
    return found


def _batch_of(store: Any, job: Job) -> dict[str, Any] | None:
    """The batch `job` is a member (batch.MEMBER_OF) or a callback (batch.BATCH_OF) of."""
    batch_id = job.meta.get(MEMBER_OF) or job.meta.get(BATCH_OF)
    if batch_id is None:
        return None
    found = batches.info(store, batch_id)
    counts = found.to_dict() if found else dict.fromkeys(("total", "pending", "succeeded", "dead", "cancelled"))
    callbacks = found.callbacks if found else {}
    role = next((name for name, callback in callbacks.items() if callback == job.id), "member")
    return {**counts, "id": batch_id, "role": role, "state": found.state if found else "open",
            "callbacks": callbacks}


def view(job: Job, sealer: Sealer | None = None) -> dict[str, Any]:
    """A job as the API shows it (every field job.HTTP_FIELDS names); a topic job shows
    its topic and body. An encrypted field is opened with the App's keys (`sealer`);
    one this process cannot open shows as "encrypted (N bytes)", its arguments as null,
    and `encrypted` gives the size of each such field."""
    job, hidden = for_display(job, sealer)
    is_topic = job.task == TASK_NAME
    shown = {http: getattr(job, name) for http, name in HTTP_FIELDS.items()}
    shown.update({
        "state": str(job.state), "priority": job.priority_name,
        "topic": job.args[0] if is_topic and job.args else None,
        "body": job.kwargs.get("body") if is_topic else None,
        "task": None if is_topic else job.task,
        "args": None if is_topic or hidden else list(job.args),
        "kwargs": None if is_topic or hidden else job.kwargs,
        "encrypted": hidden or None,
        "ttr": job.timeout - TIMEOUT_MARGIN if is_topic and job.timeout else job.timeout,
        "waiting_for": _waits(job),
    })
    return shown


def _waits(job: Job) -> dict[str, Any] | None:
    """The event and key a job in a durable wait waits for, from its record (no read): what
    a list row shows; GET /v1/jobs/{id} adds the step and the timeout from its checkpoints."""
    if job.waits_for is None or job.state != JobState.SCHEDULED:
        return None
    event, _, key = job.waits_for.partition("\t")
    return {"step": None, "event": event, "key": key, "until": job.run_at}
