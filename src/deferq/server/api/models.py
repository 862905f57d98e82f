"""The typed models of the REST API: every request body and query, and the answers.

Each model is a msgspec Struct that does two jobs: `fields.parse` checks a request with
it, and openapi.py turns it into the document's JSON Schema (msgspec.json.schema_components).
The server and /openapi.json read the same class, so they cannot disagree; schemathesis
holds them to it (tests/server/test_server_schema.py). A rule no JSON Schema can state is a
"format" the document names and explains (a callback URL the policy allows, a retry
condition that parses): see FORMATS.

Why msgspec (and not pydantic): one small wheel with no dependencies, strict about JSON
types as orjson is (true is no integer, 1.5 is no whole number), and the fastest of the
two at checking a dict, which matters on POST /v1/jobs (the hot path).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from ...job import JobState
from ...observe.history import MAX_MINUTES as MAX_HISTORY_MINUTES
from ...options import HTTP_OPTIONS, MAX_REMARK, PATTERN_WORDS, Option
from ...schedules.definition import NAME_PATTERN as SCHEDULE_NAME_PATTERN
from ...schedules.timing import MAX_CRON, MAX_ZONE
from ...values import MAX_PAUSE, POSITIVE_RATE
from ..http.auth import SCOPES
from ..http.config import ServerConfig
from ..http.fields import matching
from ..topics.topic import NAME_PATTERN, Backoff, PriorityName, TopicRequest

# Formats the document names for what no JSON Schema keyword can say; the server checks them.
FORMATS = {
    "callback-url": "An http(s) URL that the server's network policy allows (docs/http.md, \"Where "
                    "callbacks may go\"): by default no loopback, private, link-local or metadata address.",
    "retry-condition": "A condition such as {res.code}!=200, at most 2000 characters (docs/http.md, "
                       "\"The retry-condition language\").",
    "page-cursor": "The `cursor` of a page of GET /v1/jobs, as the server gave it (opaque: only the "
                   "store that made it reads it).",
    "cron": "A cron expression: five fields (minute hour day month weekday), or six with seconds first "
            "(\"*/10 * * * * *\": every ten seconds); one that matches no date is refused.",
    "time-zone": "An IANA time zone name such as Europe/Berlin (docs/schedules.md for daylight saving).",
}

TOPIC_NAME = Annotated[str, matching(NAME_PATTERN.pattern, "1-100 letters, digits and _.:-")]
STATES = tuple(str(s) for s in JobState)
# "retrying": scheduled jobs that failed before (attempts > 0), and "waiting": scheduled
# jobs in a durable wait (job.wait_for), filters of GET /v1/jobs
STATE_FILTERS = (*STATES, "retrying", "waiting")
if TYPE_CHECKING:  # the choices are made at run time, from the names they stand for
    State: TypeAlias = str
    StateFilter: TypeAlias = str
    Scope: TypeAlias = str
else:
    State = Literal[STATES]
    StateFilter = Literal[STATE_FILTERS]
    Scope = Literal[SCOPES]
Limit = Annotated[int, Meta(ge=1, le=1000)]
MAX_IDS = 1000  # jobs one batch request may name
JobId = Annotated[str, Meta(min_length=1, max_length=100)]


# -- job options: from deferq.options, the one schema -----------------------------------------
#
# The request models take their option fields from options.HTTP_OPTIONS, so a new option
# there is a new field here, its checks and its schema included, with no edit in server/.
# Each option's `openapi` fragment is JSON Schema already; `option_type` reads it as the
# msgspec type that enforces exactly that fragment, and that type's schema is what the
# document shows. What a fragment cannot say stays in the option's `check`, which runs
# after the model (jobs.option_values), converts the value and words a refusal.
#
_BASES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool}
_METAS = {"minimum": "ge", "maximum": "le", "exclusiveMaximum": "lt", "minLength": "min_length",
          "maxLength": "max_length", "maxItems": "max_length", "description": "description"}


def option_schema(http_name: str, spec: Option) -> dict[str, Any]:
    return {"description": spec.help, **spec.openapi}


def option_type(schema: dict[str, Any]) -> Any:
    """The msgspec type that enforces a JSON Schema fragment of deferq.options. A keyword
    it does not know is an error at import: the schema must never say more than is checked."""
    meta: dict[str, Any] = {}
    metas: list[Meta] = []
    choices = schema.get("oneOf") or schema.get("anyOf")
    if choices:
        union = tuple(option_type(choice) for choice in choices)
        base: Any = union[0]
        for member in union[1:]:
            base = base | member
    elif "enum" in schema:
        base = Literal[tuple(schema["enum"])]
    elif schema.get("type") == "array":
        base = list[option_type(schema["items"])]  # type: ignore[misc]  # a type made at import
    else:
        base = _BASES[schema["type"]]
    for key, value in schema.items():
        if key in _METAS:
            meta[_METAS[key]] = value
        elif key == "exclusiveMinimum":  # OpenAPI 3.0's boolean form, or 3.1's number
            meta["gt"] = schema["minimum"] if value is True else value
            meta.pop("ge", None)
        elif key == "pattern":
            metas.append(matching(value, PATTERN_WORDS.get(value, f"a string matching {value}")))
        elif key not in ("type", "enum", "oneOf", "anyOf", "items"):
            raise ValueError(f"option schema keyword {key!r} is not checked by the HTTP models")
    if "gt" in meta:
        meta.pop("ge", None)
    if meta:
        metas.insert(0, Meta(**meta))
    return Annotated[(base, *metas)] if metas else base


def _option_fields(leave_out: tuple[str, ...] = ()) -> list[tuple[str, Any, Any]]:
    """(name, type, default) of each HTTP option; null is the same as leaving it out."""
    return [(name, option_type(option_schema(name, spec)) | None, None)
            for name, (_, spec) in HTTP_OPTIONS.items() if name not in leave_out]


# A topic job: the topic decides the queue (its callbacks' queue), so a request may not.
TOPIC_DECIDES = ("queue",)
TASK_NAME = matching(r"^(?!deferq\.)[^\x00]*$", "the name of your task (1-200 characters, not deferq.*)",
                     min_length=1, max_length=200, description="Run this Python task with args/kwargs.")
TopicJob: type[Struct] = msgspec.defstruct(
    "TopicJob",
    [("topic", Annotated[TOPIC_NAME, Meta(description="Deliver `body` to this topic's callback URL.")]),
     ("body", Annotated[Any, Meta(description="Any JSON value, POSTed to the topic's URL.")], None),
     *_option_fields(TOPIC_DECIDES)],
    namespace={"__doc__": "A job that POSTs its body to a topic's callback URL (delay_ms or at, not both)."},
    module=__name__, kw_only=True, forbid_unknown_fields=True,
)
TaskJob: type[Struct] = msgspec.defstruct(
    "TaskJob",
    [("task", Annotated[str, TASK_NAME]),
     ("args", list[Any] | None, None),
     ("kwargs", dict[str, Any] | None, None),
     *_option_fields()],
    namespace={"__doc__": "A job that runs a Python task of your workers (delay_ms or at, not both)."},
    module=__name__, kw_only=True, forbid_unknown_fields=True,
)
# Rules between fields, in the words of the schema (openapi.py adds them to each model);
# jobs.parse_job checks the same rules.
ONE_DUE_TIME = {"not": {"required": ["delay_ms", "at"]}}  # delay_ms or at, not both
_GIVEN = {"not": {"type": "null"}}  # null is the same as leaving a field out
KEYED_CONFLICTS = {  # replace and debounce need a key; max_wait_ms is for debounce (options.conflict_mode)
    "allOf": [
        {"if": {"required": ["on_conflict"], "properties": {"on_conflict": {"enum": ["replace", "debounce"]}}},
         "then": {"required": ["key"], "properties": {"key": {"type": "string"}}}},
        {"if": {"required": ["max_wait_ms"], "properties": {"max_wait_ms": _GIVEN}},
         "then": {"required": ["on_conflict"], "properties": {"on_conflict": {"const": "debounce"}}}},
        # a deduplication window needs a key (options.window_rules); 0 is no window
        {"if": {"required": ["unique_for_ms"], "properties": {"unique_for_ms": {"type": "integer", "minimum": 1}}},
         "then": {"required": ["key"], "properties": {"key": {"type": "string"}}}},
    ],
}
JOB_RULES = {**ONE_DUE_TIME, **KEYED_CONFLICTS}
JOB_REQUEST = {"description": "A topic job (with topic) or a task job (with task): exactly one.",
               "oneOf": [{"$ref": f"#/components/schemas/{kind}"} for kind in ("TopicJob", "TaskJob")]}
# What msgspec cannot write itself, merged into its schemas by openapi.py: each job of a
# batch is a JobRequest (the model takes it as an object, and jobs.parse_job reads it).
SCHEMA_RULES: dict[str, dict[str, Any]] = {
    "TopicJob": JOB_RULES, "TaskJob": JOB_RULES,
    "BatchRequest": {"properties": {"jobs": {"items": {"$ref": "#/components/schemas/JobRequest"}}}},
}


class BatchRequest(Struct, forbid_unknown_fields=True):
    """Many jobs at once: all are stored, or none."""

    jobs: Annotated[list[dict[str, Any]], Meta(min_length=1, max_length=ServerConfig.max_batch)]


# -- schedules ---------------------------------------------------------------------------------

SCHEDULE_OPTIONS = ("queue", "priority", "max_attempts", "ttr")  # the job options a schedule's job takes
SCHEDULE_NAME = SCHEDULE_NAME_PATTERN
_SCHEDULE_JOB: list[tuple[str, Any] | tuple[str, Any, Any]] = [
    ("task", Annotated[str, TASK_NAME]),
    ("jitter", Annotated[float, Meta(ge=0, lt=86400, description="Seconds each tick's job may be delayed, "
                                                                "at random.")] | None, None),
    ("missed", Annotated[Literal["skip", "latest", "all"], Meta(
        description="Ticks missed while no process fired schedules: none fire, the newest, or all.")] | None,
     None),
    ("args", list[Any] | None, None),
    ("kwargs", dict[str, Any] | None, None),
    *[field for field in _option_fields() if field[0] in SCHEDULE_OPTIONS],
]
CronSchedule: type[Struct] = msgspec.defstruct(
    "CronSchedule",
    [("cron", Annotated[str, Meta(max_length=MAX_CRON, extra_json_schema={"format": "cron"})]),
     ("tz", Annotated[str, Meta(max_length=MAX_ZONE, extra_json_schema={"format": "time-zone"},
                                description="The zone cron is read in (default UTC).")] | None, None),
     *_SCHEDULE_JOB],
    namespace={"__doc__": "A schedule on a cron expression, read in a time zone (UTC by default)."},
    module=__name__, kw_only=True, forbid_unknown_fields=True,
)
EverySchedule: type[Struct] = msgspec.defstruct(
    "EverySchedule",
    [("every", Annotated[float, Meta(ge=1, le=366 * 86400, description="Seconds between ticks.")]),
     *_SCHEDULE_JOB],
    namespace={"__doc__": "A schedule every so many seconds (ticks on whole multiples since the epoch)."},
    module=__name__, kw_only=True, forbid_unknown_fields=True,
)
SCHEDULE_REQUEST = {"description": "A cron schedule (with cron) or an interval (with every): exactly one.",
                    "oneOf": [{"$ref": f"#/components/schemas/{kind}"}
                              for kind in ("CronSchedule", "EverySchedule")]}


class ScheduleLastJob(Struct):
    id: str
    state: str


class Schedule(Struct):
    name: str
    task: str
    timing: Annotated[str, Meta(description='"*/5 * * * * (Europe/Berlin)" or "every 30s"')]
    described: Annotated[str, Meta(description="The timing and its next ticks on its zone's clock: "
                                               '"*/10 * * * * * (UTC): next 2026-12-07 09:00:10+00:00, '
                                               '09:00:20, 09:00:30".')]
    cron: str | None
    every: float | None
    tz: str | None
    jitter: float
    missed: str
    args: list[Any]
    kwargs: dict[str, Any]
    options: dict[str, Any]
    paused: bool
    source: Annotated[str, Meta(description="code, config or api: where it was declared.")]
    since: Annotated[float, Meta(description="When it began counting ticks (added, retimed or resumed).")]
    next: Annotated[list[float], Meta(description="The next five ticks (none while paused).")]
    last_tick: float | None
    last_job: ScheduleLastJob | None
    encrypted: Annotated[dict[str, int], Meta(description=(
        "Set when the schedule's arguments are encrypted at rest and this server cannot open them "
        "(it lacks the key): `{\"args\": N}`, their size in bytes; args and kwargs are then empty. "
        "Null when they are shown."))] | None = None


class BrokenSchedule(Struct):
    """A stored record that is not a schedule this server can fire (written by hand or by
    another version): left out of the firing, shown so it can be put again or removed."""

    name: str
    problem: Annotated[str, Meta(description="Why it cannot be fired, in one sentence.")]


class ScheduleList(Struct):
    schedules: list[Schedule]
    broken: list[BrokenSchedule]
    leader: Annotated[str | None, Meta(description="The process firing schedules now (null: none).")]


# -- tokens and settings -----------------------------------------------------------------------


class TokenRequest(Struct, forbid_unknown_fields=True):
    """A new API token: its scope and a note to recognise it by."""

    scope: Scope
    note: Annotated[str, Meta(max_length=200)] | None = None


_DURATION = matching(r"^(?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d))+$", 'a duration like "30s", "5m" or "1h30m"')
Duration = Annotated[float, Meta(ge=0)] | Annotated[str, _DURATION]
_PORT = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_ADDRESS = matching(r"^[^ @\x00]+@[^ @\x00]+$", "an e-mail address")


class EmailSettings(Struct, forbid_unknown_fields=True, rename={"sender": "from", "recipients": "to"}):
    """An SMTP server and who gets the alerts."""

    smtp: Annotated[str, matching(f"^(?:[^:\\x00]+|[^\\x00]+:{_PORT})$", '"host" or "host:port"')]
    sender: Annotated[str, _ADDRESS]
    recipients: Annotated[str, _ADDRESS] | Annotated[list[Annotated[str, _ADDRESS]], Meta(min_length=1)]
    username: str | UnsetType = UNSET
    password: str | UnsetType = UNSET
    starttls: bool | UnsetType = UNSET


_WEBHOOK = matching(r"^https?://[A-Za-z0-9.-]+(?::[0-9]{1,5})?(?:[/?#][!-~]*)?$", "an http(s):// URL")


class AlertSettings(Struct, forbid_unknown_fields=True):
    """Where alerts about dead callbacks go (the supervisor's [alerts] table)."""

    email: EmailSettings | UnsetType = UNSET
    webhook: Annotated[str, _WEBHOOK] | None | UnsetType = UNSET
    min_interval: Duration | UnsetType = UNSET
    backlog: dict[str, Annotated[int, Meta(ge=0, le=10**12)]] | UnsetType = UNSET
    oldest_waiting: Duration | None | UnsetType = UNSET
    dead_letters: bool | UnsetType = UNSET


# -- query parameters --------------------------------------------------------------------------


class JobsQuery(Struct, forbid_unknown_fields=True):
    """Filters that combine: the job with a key; else jobs in a state, of a queue, of a
    task, with a tag, of a chunk call, matching `q`, a page at a time (newest first;
    `cursor` for the next page)."""

    key: Annotated[str, Meta(description="The job with this unique key.")] | UnsetType = UNSET
    state: Annotated[StateFilter, Meta(description="Jobs in this state (every state if left out); `retrying`: "
                                       "the scheduled ones that failed before and wait for their next "
                                       "attempt; `waiting`: the scheduled ones in a durable wait "
                                       "(`job.wait_for`), until its event or timeout.")] | UnsetType = UNSET
    queue: Annotated[str, Meta(description="Only jobs of this queue.")] | UnsetType = UNSET
    task: Annotated[str, Meta(description="Only jobs of this task (its exact name).")] | UnsetType = UNSET
    tag: Annotated[str, Meta(description="Only jobs with this tag (exact, among theirs).")] | UnsetType = UNSET
    chunk: Annotated[str, Meta(max_length=64, description="Only the jobs of this chunk call (a job's "
                               "`chunk_call`): those a chunk task's call ran together.")] | UnsetType = UNSET
    q: Annotated[str, Meta(max_length=200, description="A job id or unique key (found exactly, however old), "
                           "and text (3 characters or more) in the arguments, error or key.")] | UnsetType = UNSET
    cursor: Annotated[str, Meta(max_length=2000, extra_json_schema={"format": "page-cursor"},
                                description="The previous page's `cursor`: the next page.")] | UnsetType = UNSET
    window: Annotated[int, Meta(ge=1, le=100_000, description="Where the store has no index for the task "
                                "or text (MySQL, Redis): how many of the newest jobs to look at.")] = 10_000
    limit: Limit = 100


class CancelQuery(Struct, forbid_unknown_fields=True):
    """Why a job is cancelled, kept in its remark with who cancelled it and when."""

    reason: Annotated[str, Meta(max_length=300, description="Why, in a few words (kept in the job's remark).")] \
        | UnsetType = UNSET
    via: Annotated[str, Meta(pattern="^[a-z]{1,20}$", description="Where it was asked from (the console sends "
                             "`console`), kept in the remark.")] | UnsetType = UNSET


class JobQuery(Struct, forbid_unknown_fields=True):
    wait: Annotated[int, Meta(ge=0, le=60, description=(
        "Seconds to wait for the job to finish before answering (woken by the store); "
        "the job is shown as it stands when they pass."))] = 0

class HistoryQuery(Struct, forbid_unknown_fields=True):
    """A window of the per-minute history (deferq.history), of a queue, a task, or both."""

    queue: Annotated[str, Meta(description="Only this queue (every queue if left out).")] | UnsetType = UNSET
    task: Annotated[str, Meta(description="Only this task (every task if left out).")] | UnsetType = UNSET
    minutes: Annotated[int, Meta(ge=1, le=MAX_HISTORY_MINUTES, description="How far back, the current minute "
                                 "included.")] = 60
    step: Annotated[int, Meta(ge=1, le=1440, description="Minutes per point (by default, enough for at "
                              "most 360 points): counts add up, percentiles merge.")] | UnsetType = UNSET


class DeadQuery(Struct, forbid_unknown_fields=True):
    queue: str | UnsetType = UNSET
    limit: Limit = 100


class QueueQuery(Struct, forbid_unknown_fields=True):
    queue: str | UnsetType = UNSET


class RemarkRequest(Struct, forbid_unknown_fields=True):
    """A job's new remark (null clears it)."""

    remark: Annotated[str, Meta(max_length=MAX_REMARK)] | None


class LimitRequest(Struct, forbid_unknown_fields=True):
    """A limit set at run time on a task, a limit key or a queue (`queue:NAME`, every job of
    the queue): a rate, a concurrency, or both
    (it replaces what was set before); `pause_s` pauses it as well."""

    rate: Annotated[str, matching(POSITIVE_RATE, 'runs per period, like "50/s" or "100/m"', max_length=40,
                                  description='Runs per period, like "50/s" or "100/m".')] | None = None
    concurrency: Annotated[int, Meta(ge=1, le=10_000, description="Runs at once, across the fleet.")] | None = None
    pause_s: Annotated[float, Meta(gt=0, le=MAX_PAUSE, description="No job under it starts for this many "
                                   "seconds.")] | None = None


class EventRequest(Struct, forbid_unknown_fields=True):
    """An event for the jobs waiting for it (`job.wait_for(name, event=..., key=...)`)."""

    event: Annotated[str, Meta(min_length=1, max_length=60, pattern=r"^[^\x00-\x1f]+$")]
    key: Annotated[str, Meta(min_length=1, max_length=100, pattern=r"^[^\x00-\x1f]+$")]
    data: Any = None
    keep: Annotated[float, Meta(ge=0, le=366 * 86400, description=(
        "Seconds the event is kept for jobs that wait for it later (default a week)."))] = 7 * 86400.0


class RetryFromRequest(Struct, forbid_unknown_fields=True):
    """The step (or sleep, or wait) a finished durable job runs again from."""

    step: Annotated[str, Meta(min_length=1, max_length=150, pattern=r"^[^\x00-\x1f]+$",
                              description="Its name; the checkpoints from it on are dropped.")]


class IdsRequest(Struct, forbid_unknown_fields=True):
    """Jobs named by id (those a console filter matched)."""

    ids: Annotated[list[JobId], Meta(min_length=1, max_length=MAX_IDS)]


class CancelBatchRequest(Struct, forbid_unknown_fields=True):
    """Jobs to cancel (waiting ones) or stop (running ones), by id, and why."""

    ids: Annotated[list[str], Meta(min_length=1, max_length=MAX_IDS)]
    reason: Annotated[str, Meta(max_length=300)] | None = None


class CancelledBatch(Struct):
    cancelled: Annotated[int, Meta(description="Waiting jobs now cancelled.")]
    stopping: Annotated[int, Meta(description="Running jobs asked to stop: each ends cancelled at its "
                                  "worker's next heartbeat.")]
    not_cancelled: Annotated[list[str], Meta(description="Ids that were finished or unknown.")]


class DeletedJobs(Struct):
    deleted: int
    not_deleted: Annotated[list[str], Meta(description="Ids that were not finished (or unknown).")]


class PurgeQuery(Struct, forbid_unknown_fields=True):
    older_than: Annotated[int, Meta(ge=0, le=10 * 365 * 86400, description="Seconds since they died.")] = 0


# -- answers (the document's; the handlers build the same shapes as dicts) ---------------------


class ErrorDetail(Struct):
    code: str
    message: str


class Error(Struct):
    error: ErrorDetail


class Receipt(Struct):
    id: str
    state: State
    run_at: float


class Receipts(Struct):
    jobs: list[Receipt]


class Job(Struct):
    id: str
    state: State
    queue: str
    topic: str | None
    body: Any
    task: str | None
    args: list[Any] | None
    kwargs: dict[str, Any] | None
    priority: PriorityName
    attempts: int
    max_attempts: int
    key: str | None
    ttr: float | None
    run_at: float
    created_at: float
    finished_at: float | None
    error: str | None
    result: Any
    progress: Annotated[float, Meta(ge=0, le=1)] | None = None
    progress_message: str | None = None
    cancel_requested: bool = False
    expires_at: float | None = None
    updated_at: Annotated[float, Meta(description="When it last changed: state, lease, remark.")] | None = None
    remark: Annotated[str, Meta(description="Free text kept with the job for people.")] | None = None
    worker: Annotated[str, Meta(description="The worker holding its lease, while it runs.")] | None = None
    last_worker: Annotated[str, Meta(description="The worker that last ran it (kept after).")] | None = None
    tags: Annotated[list[str], Meta(description="Labels kept with the job.")] = msgspec.field(default_factory=list)
    fair_key: Annotated[str, Meta(description="Its key in its queue's round-robin (fair queues).")] | None = None
    chunk_call: Annotated[str, Meta(description=(
        "A chunk task's job: the id of the call that last ran it, shared by the jobs that call ran "
        "(`GET /v1/jobs?chunk=` lists them); a job retried in a later call names that call. Null for "
        "a plain task's job and one not yet run."))] | None = None
    encrypted: Annotated[dict[str, int], Meta(description=(
        "The fields encrypted at rest that this server cannot open (it lacks the key), each with its "
        "size in bytes: `args` (then args and kwargs are null), `result`, `error`, `progress_message` "
        "(each then shown as \"encrypted (N bytes)\"). Null when every field is shown."))] | None = None
    # GET /v1/jobs/{id} only: the job's place in a workflow (jobs.workflow)
    after: Annotated[list[str], Meta(description="The ids of the jobs it runs after.")] | None = None
    waiting: Annotated[list[str], Meta(description="The ids of the jobs still waiting for it.")] | None = None
    parents: Annotated[list[JobLink], Meta(description=(
        "The jobs it runs after, with their states (the first 50); for a child job "
        "(`job.gather`), the job that started it."))] | None = None
    children: Annotated[list[JobLink], Meta(description=(
        "The jobs that run after it (the first 50): those enqueued with it (a chain's next step, "
        "a chord's callback, a batch's callbacks), those still waiting for it, and the child jobs "
        "it started (`job.gather`, `job.run_child`)."))] | None = None
    batch: Annotated[JobBatch, Meta(description="The batch it is a member or a callback of.")] | None = None
    steps: Annotated[list[Step], Meta(description="Its durable steps, sleeps and waits.")] | None = None
    waiting_for: Annotated[WaitingFor, Meta(description=(
        "The event a scheduled job waits for (`job.wait_for`); the console shows such a job as "
        "`waiting`. Null for every other job."))] | None = None
    attempt_log: Annotated[list[Attempt], Meta(description=(
        "GET /v1/jobs/{id} only: each attempt of a job that failed at least once (start, worker, "
        "time, outcome, error), oldest first; the newest 25, kept 30 days. Empty for a job that "
        "never failed."))] | None = None


class WaitingFor(Struct):
    """The wait a scheduled job is in: its step's name, the event and key it waits for,
    and when it times out. In a list, the step is null (GET /v1/jobs/{id} has it)."""

    step: str | None
    event: str
    key: str
    until: float


class Attempt(Struct):
    """One attempt of a job: when it started (store clock), the worker, how long it ran,
    how it ended (succeeded, retry, dead, cancelled) and its error."""

    attempt: int
    worker: str | None
    started_at: float
    seconds: float | None
    outcome: str
    error: str | None
    chunk_call: Annotated[str, Meta(description="A chunk task's attempt: the id of the call it ran in "
                                    "(`GET /v1/jobs?chunk=`).")] | None = None


class JobLink(Struct):
    """Another job of a workflow, as the job page lists it."""

    id: str
    state: Annotated[State, Meta(description="Its state.")] | None  # null: no longer in the store (purged)
    task: str | None
    queue: str | None


class Batch(Struct):
    id: str
    total: int
    pending: int
    succeeded: int
    dead: int
    cancelled: int
    state: Literal["running", "complete"]
    callbacks: dict[str, str]
    members: Annotated[list[JobLink], Meta(description="The first members (`?members=N`, 50 unless told), "
                                           "in the order they were added, with their states.")] = []


class BatchQuery(Struct, forbid_unknown_fields=True):
    members: Annotated[int, Meta(ge=0, le=1000, description="How many members to list with their states.")] = 50


class JobBatch(Struct):
    """A job's batch: its role in it and the batch's counts (null until the batch's
    `with` block has ended: then its members are all known)."""

    id: str
    role: Literal["member", "on_complete", "on_success"]
    total: int | None
    pending: int | None
    succeeded: int | None
    dead: int | None
    cancelled: int | None
    state: Literal["open", "running", "complete"]
    callbacks: dict[str, str]


class JobSearch(Struct):
    """How `q` was looked for: exact id and key matches first, then text."""

    exact: Annotated[int, Meta(description="Jobs found by id or key (first page only).")]
    text: Annotated[Literal["index", "words", "scan"] | None, Meta(description=(
        "index: any substring, through the store's text index; words: whole words (PostgreSQL "
        "without pg_trgm); scan: the newest `window` jobs were looked at; null: no text search "
        "(fewer than 3 characters)."))]
    scanned: Annotated[int | None, Meta(description="Jobs looked at, by a scan.")] = None
    complete: Annotated[bool, Meta(description="False: a scan stopped at its window; older jobs were "
                                   "not searched.")] = True


class JobList(Struct):
    jobs: list[Job]
    cursor: Annotated[str | None, Meta(description="The next page's (null: this was the last).")] = None
    search: JobSearch | None = None


class JobStateAnswer(Struct):
    id: str
    state: State
    cancel_requested: bool = False


QueueStats = msgspec.defstruct("QueueStats", [*((s, int) for s in STATES), ("oldest_wait", float),
                                             ("paused", bool)], module=__name__)


class QueueList(Struct):
    queues: dict[str, QueueStats]  # type: ignore[valid-type]


class QueuePaused(Struct):
    queue: str
    paused: Annotated[bool, Meta(description="Whether the queue is paused now.")]
    changed: Annotated[bool, Meta(description="False when it already was so.")]


class LimitSetting(Struct):
    rate: str | None
    concurrency: int | None
    paused_for: Annotated[float | None, Meta(description="Seconds its pause still lasts.")]


class LimitList(Struct):
    limits: dict[str, LimitSetting]


class Remark(Struct):
    id: str
    remark: str | None


class EventSent(Struct):
    event: str
    key: str
    woken: Annotated[int, Meta(description="How many waiting jobs it woke.")]


class KeptEvent(Struct):
    event: str
    key: str
    id: str
    at: Annotated[float, Meta(description="When it was sent.")]
    data: Any
    size: Annotated[int, Meta(description="Bytes of its data as JSON.")] = 0
    woke: Annotated[int, Meta(description="How many waiting jobs it woke when it was sent.")] = 0


class EventList(Struct):
    events: list[KeptEvent]


class Undone(Struct):
    """How a step's undo handler ran when its job ended dead or was cancelled."""

    state: Literal["done", "failed", "not run"]
    at: float
    took: float | None = None
    error: str | None = None


class Step(Struct):
    """One durable step, sleep or wait of a job, in the order the job reached them."""

    name: str
    kind: Literal["step", "sleep", "wait", "children"]
    state: Literal["done", "sleeping", "waiting", "timed out", "retrying", "failed"]
    at: Annotated[float, Meta(description="When the job first reached it.")]
    attempt: int | None
    took: float | None = None
    result: Any = None
    fn: str | None = None
    until: Annotated[float, Meta(description="A sleep's end, or a wait's timeout.")] | None = None
    event: str | None = None
    key: str | None = None
    failures: Annotated[int, Meta(description="Failed tries of a step with retries of its own.")] | None = None
    error: Annotated[str, Meta(description="A retrying step's last error.")] | None = None
    total: Annotated[int, Meta(description="The child jobs a gather started.")] | None = None
    ended: Annotated[int, Meta(description="Those of a gather's child jobs that have ended.")] | None = None
    failed: Annotated[int, Meta(description=(
        "Those of a gather's child jobs that ended dead or cancelled."))] | None = None
    undo: Annotated[str, Meta(description="The step's undo handler (job.step's undo=).")] | None = None
    undone: Undone | None = None


class DeletedBatch(Struct):
    deleted: int
    not_deleted: Annotated[list[str], Meta(description="Ids that were not dead letters (any more).")]


class StorePart(Struct):
    name: Annotated[str, Meta(description='A Redis shard as host:port/db, or "store" for a store in one part.')]
    up: bool
    latency_ms: Annotated[float, Meta(description="Median of 3 pings.")] | None
    version: str | None
    memory_bytes: Annotated[int, Meta(description="Memory in use (Redis).")] | None
    size_bytes: Annotated[int, Meta(description="Size on disk (a SQLite file).")] | None
    error: str | None


class StoreParts(Struct):
    parts: list[StorePart]


class ShardRequest(Struct, forbid_unknown_fields=True):
    """A Redis server to add to a redis+shards:// store."""

    server: Annotated[str, Meta(min_length=1, max_length=300, description=(
        "host:port[/db] as in the store's URL (with [[user]:password@] before it if needed); "
        "the URL's query (prefix, timeouts) applies to it."))]


class Shard(Struct):
    number: Annotated[int, Meta(description="The number its jobs' ids are marked with; never reused.")]
    name: Annotated[str, Meta(description="host:port/db")]
    role: Annotated[Literal["anchor", "added"], Meta(description=(
        "anchor: named in the URL (unique keys and records live there); added: at run time."))]
    state: Literal["live", "draining", "removed"]
    since: Annotated[float, Meta(description="When it got its state (Unix seconds).")] | None


class ShardChange(Struct):
    at: float
    who: str
    action: Literal["add", "drain", "undrain", "remove"]
    shard: str


class Shards(Struct):
    sharded: Annotated[bool, Meta(description="False for a store that is not redis+shards://.")]
    version: int
    shards: list[Shard]
    log: Annotated[list[ShardChange], Meta(description="Who changed the shards and when, newest last.")]


class Topic(Struct):
    name: str
    url: str
    method: str
    headers: dict[str, str]
    delay_ms: int
    ttr: float
    max_attempts: int
    backoff: Backoff
    retry_condition: str | None
    priority: PriorityName
    queue: str
    signing_secret: str
    max_answer_bytes: int
    updated_at: float


class TopicList(Struct):
    topics: list[Topic]


class Token(Struct):
    id: str
    scope: Scope
    note: str
    created_at: float
    token: Annotated[str, Meta(description="Shown only when created.")] | UnsetType = UNSET


class TokenList(Struct):
    tokens: list[Token]


class Deleted(Struct):
    deleted: str


class Purged(Struct):
    purged: int


class Retried(Struct):
    retried: int


class Alerts(Struct):
    alerts: dict[str, Any] | None


class SavedAlerts(Struct):
    alerts: AlertSettings


class Status(Struct):
    status: str


Percentiles = list[Annotated[float, Meta(description="seconds")] | None]


class HistorySeries(Struct):
    """One list per series, a value per point; percentiles are null where nothing ran."""

    t: Annotated[list[int], Meta(description="Each point's first minute, epoch seconds.")]
    enqueued: list[int]
    succeeded: list[int]
    retried: list[int]
    failed: Annotated[list[int], Meta(description="Attempts that raised (retried or dead).")]
    dead: list[int]
    cancelled: list[int]
    expired: list[int]
    wait_p50: Percentiles
    wait_p90: Percentiles
    wait_p99: Percentiles
    run_p50: Percentiles
    run_p90: Percentiles
    run_p99: Percentiles


class HistoryTotals(Struct):
    enqueued: int
    succeeded: int
    retried: int
    failed: int
    dead: int
    cancelled: int
    expired: int
    wait_p50: float | None
    wait_p90: float | None
    wait_p99: float | None
    run_p50: float | None
    run_p90: float | None
    run_p99: float | None


class History(Struct):
    queue: str | None
    task: str | None
    minutes: int
    step: int
    series: HistorySeries
    totals: HistoryTotals


MODELS: tuple[Any, ...] = (
    TopicJob, TaskJob, BatchRequest, TopicRequest, TokenRequest, AlertSettings, Error, Receipt,
    Receipts, Job, JobList, Batch, JobStateAnswer, QueueList, Topic, TopicList, Token, TokenList,
    Deleted, Purged, Retried, Alerts, SavedAlerts, Status, QueuePaused, Remark, RemarkRequest, IdsRequest,
    DeletedBatch, StorePart, StoreParts, ShardRequest, Shard, ShardChange, Shards, History, CancelBatchRequest,
    CancelledBatch, DeletedJobs, CronSchedule, EverySchedule, Schedule, BrokenSchedule, ScheduleList,
    EventRequest, EventSent, Step, Undone, KeptEvent, RetryFromRequest, EventList, LimitRequest, LimitSetting,
    LimitList,
)
