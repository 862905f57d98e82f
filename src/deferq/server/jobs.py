"""Job requests and views: what POST /v1/jobs accepts, and how a job is shown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..backends.base import Enqueue
from ..job import Job, Priority, encode_payload, new_job_id
from ..options import HTTP_OPTIONS, JobOptions
from ..task import Call, build_enqueue
from . import fields
from .delivery import TASK_NAME, TIMEOUT_MARGIN
from .errors import Invalid

if TYPE_CHECKING:
    from .service import Service

# The request's own fields, then every job option the HTTP API takes (deferq.options).
JOB_FIELDS = ("topic", "task", "body", "args", "kwargs", *HTTP_OPTIONS)
JSON_TYPES: dict[str, tuple[type, ...]] = {"integer": (int,), "number": (int, float), "string": (str,)}
JSON_NAMES = {"integer": "a whole number", "number": "a number", "string": "a string"}


async def parse_job(service: Service, data: Any, where: str = "the job") -> Enqueue:
    """A job request as the store's Enqueue; a problem is one sentence (422)."""
    data = fields.json_object(data, where)
    fields.only_known(data, JOB_FIELDS, where)
    topic_name, task = data.get("topic"), data.get("task")
    if (topic_name is None) == (task is None):
        raise Invalid(f"{where} needs exactly one of topic (a callback) or task (a Python task)")
    options = option_values(data)
    if "delay" in options and "at" in options:
        raise Invalid(f"{where} gives both delay_ms and at: give one")
    if topic_name is not None:
        return await _topic_job(service, data, topic_name, options)
    call = _task_call(data, task, options)
    known = service.app.tasks.get(call.task)
    try:
        return build_enqueue(call, known.defaults if known else None, 0.0)
    except (TypeError, ValueError) as exc:
        raise Invalid(str(exc)) from None


def option_values(data: dict[str, Any]) -> dict[str, Any]:
    """The job options a request sets, by their Python names, checked by the schema."""
    values = {}
    for http_name, (name, spec) in HTTP_OPTIONS.items():
        value = data.get(http_name)
        if value is None:
            continue
        json_type = spec.openapi.get("type")
        if json_type in JSON_TYPES and (isinstance(value, bool) or not isinstance(value, JSON_TYPES[json_type])):
            raise Invalid(f"{http_name} must be {JSON_NAMES[json_type]}, got {value!r:.60}")
        maximum = spec.openapi.get("maximum")
        if maximum is not None and value > maximum:
            raise Invalid(f"{http_name} must be at most {maximum:g}, got {value}")
        try:
            values[name] = spec.check(value * spec.http_scale if spec.http_scale != 1 else value, http_name)
        except ValueError as exc:
            raise Invalid(str(exc)) from None
    return values


async def _topic_job(service: Service, data: dict[str, Any], name: Any, options: dict[str, Any]) -> Enqueue:
    """A delivery job: the topic's settings, overridden by the request's. Built directly
    (not through JobOptions) because this is the hot path of the HTTP service."""
    for field_name in ("args", "kwargs", "queue"):
        if data.get(field_name) is not None:
            raise Invalid(f"{field_name} is for task jobs; a topic job sends its body")
    if not isinstance(name, str):
        raise Invalid(f"topic must be a string, got {fields.json_type(name)}")
    topic = await service.topic(name)
    if topic is None:
        raise Invalid(f"topic {name!r:.100} does not exist: create it with PUT /v1/topics/{{name}}")
    kwargs: dict[str, Any] = {"body": data.get("body")}
    ttr = options.get("timeout")
    if ttr is not None:
        kwargs["ttr"] = ttr
    at = options.get("at")
    job = Job(
        id=new_job_id(), task=TASK_NAME, args=(name,), kwargs=kwargs, queue=topic.queue,
        priority=options.get("priority", Priority.NAMES[topic.priority]),
        max_attempts=options.get("max_attempts") or topic.max_attempts,
        timeout=(ttr or topic.ttr) + TIMEOUT_MARGIN, key=options.get("key"), run_at=at or 0.0,
    )  # fmt: skip
    delay = 0.0 if at is not None else options.get("delay", topic.delay_ms / 1000)
    return Enqueue(job, delay, encode_payload(TASK_NAME, job.args, kwargs))


def _task_call(data: dict[str, Any], task: Any, options: dict[str, Any]) -> Call:
    if data.get("body") is not None:
        raise Invalid("body is for topic jobs; a task job takes args and kwargs")
    if not isinstance(task, str) or not 1 <= len(task) <= 200 or task.startswith("deferq."):
        raise Invalid("task must be the name of your task (1-200 characters, not deferq.*)")
    args = [] if data.get("args") is None else data["args"]
    kwargs = {} if data.get("kwargs") is None else data["kwargs"]
    if not isinstance(args, list):
        raise Invalid(f"args must be an array, got {fields.json_type(args)}")
    if not isinstance(kwargs, dict):
        raise Invalid(f"kwargs must be an object, got {fields.json_type(kwargs)}")
    return Call(task, tuple(args), kwargs, JobOptions(**options))


def receipt(job: Job) -> dict[str, Any]:
    """What POST /v1/jobs answers: enough to find the job again."""
    return {"id": job.id, "state": str(job.state), "run_at": job.run_at}


def view(job: Job) -> dict[str, Any]:
    """A job as the API shows it; a topic job shows its topic and body."""
    is_topic = job.task == TASK_NAME
    return {
        "id": job.id, "state": str(job.state), "queue": job.queue,
        "topic": job.args[0] if is_topic and job.args else None,
        "body": job.kwargs.get("body") if is_topic else None,
        "task": None if is_topic else job.task,
        "args": None if is_topic else list(job.args),
        "kwargs": None if is_topic else job.kwargs,
        "priority": job.priority_name, "attempts": job.attempts,
        "max_attempts": job.max_attempts, "key": job.key,
        "ttr": job.timeout - TIMEOUT_MARGIN if is_topic and job.timeout else job.timeout,
        "run_at": job.run_at, "created_at": job.created_at, "finished_at": job.finished_at,
        "error": job.error, "result": job.result,
    }  # fmt: skip
