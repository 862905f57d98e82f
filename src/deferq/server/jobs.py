"""Job requests and views: what POST /v1/jobs accepts, and how a job is shown."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..backends.base import Enqueue
from ..job import Job, Priority, encode_payload, new_job_id
from ..task import Call, JobOptions, build_enqueue
from . import fields
from .delivery import TASK_NAME, TIMEOUT_MARGIN
from .errors import Invalid

if TYPE_CHECKING:
    from .service import Service

JOB_FIELDS = ("topic", "task", "body", "args", "kwargs", "delay_ms", "at", "ttr", "priority",
              "key", "max_attempts", "queue")  # fmt: skip
MAX_DELAY_MS = 10 * 365 * 86400 * 1000  # ten years


async def parse_job(service: Service, data: Any, where: str = "the job") -> Enqueue:
    """A job request as the store's Enqueue; a problem is one sentence (422)."""
    data = fields.json_object(data, where)
    fields.only_known(data, JOB_FIELDS, where)
    topic_name, task = data.get("topic"), data.get("task")
    if (topic_name is None) == (task is None):
        raise Invalid(f"{where} needs exactly one of topic (a callback) or task (a Python task)")
    priority = fields.string(data, "priority", choices=Priority.NAMES)
    options: dict[str, Any] = {
        "priority": None if priority is None else Priority.NAMES[priority],
        "key": fields.string(data, "key", max_length=200),
        "max_attempts": fields.integer(data, "max_attempts", minimum=1, maximum=1000),
        "at": _at(data),
    }
    delay_ms = fields.integer(data, "delay_ms", minimum=0, maximum=MAX_DELAY_MS)
    if delay_ms is not None and options["at"] is not None:
        raise Invalid(f"{where} gives both delay_ms and at: give one")
    ttr = fields.number(data, "ttr", above=True, maximum=86400)
    if topic_name is not None:
        return await _topic_job(service, data, topic_name, options, delay_ms, ttr)
    call = _task_call(data, task, options, delay_ms, ttr)
    known = service.app.tasks.get(call.task)
    try:
        return build_enqueue(call, known.defaults if known else None, 0.0)
    except (TypeError, ValueError) as exc:
        raise Invalid(str(exc)) from None


async def _topic_job(service: Service, data: dict[str, Any], name: Any, options: dict[str, Any],
                     delay_ms: int | None, ttr: float | None) -> Enqueue:  # fmt: skip
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
    if ttr is not None:
        kwargs["ttr"] = ttr
    priority = options["priority"]
    job = Job(
        id=new_job_id(), task=TASK_NAME, args=(name,), kwargs=kwargs, queue=topic.queue,
        priority=Priority.NAMES[topic.priority] if priority is None else priority,
        max_attempts=options["max_attempts"] or topic.max_attempts,
        timeout=(ttr or topic.ttr) + TIMEOUT_MARGIN, key=options["key"],
        run_at=options["at"] or 0.0,
    )  # fmt: skip
    due_at = options["at"] is not None
    delay = 0.0 if due_at else (topic.delay_ms if delay_ms is None else delay_ms) / 1000
    return Enqueue(job, delay, encode_payload(TASK_NAME, job.args, kwargs))


def _task_call(data: dict[str, Any], task: Any, options: dict[str, Any],
               delay_ms: int | None, ttr: float | None) -> Call:  # fmt: skip
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
    options["queue"] = fields.string(data, "queue", max_length=100)
    options["timeout"] = ttr
    if delay_ms is not None:
        options["delay"] = delay_ms / 1000
    return Call(task, tuple(args), kwargs, _options(options))


def _options(options: dict[str, Any]) -> JobOptions:
    try:
        return JobOptions.parse(**{k: v for k, v in options.items() if v is not None})
    except ValueError as exc:
        raise Invalid(str(exc)) from None


def _at(data: dict[str, Any]) -> float | None:
    """`at`: epoch seconds, or an ISO 8601 time with a zone ("2030-01-01T09:00:00Z")."""
    value = data.get("at")
    if value is None:
        return None
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise Invalid(f"at must be epoch seconds or an ISO 8601 time, got {value!r:.60}") from None
        if moment.tzinfo is None:
            raise Invalid("at needs a time zone, like 2030-01-01T09:00:00Z")
        return moment.timestamp()
    return float(fields.number(data, "at", maximum=1e11))


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
