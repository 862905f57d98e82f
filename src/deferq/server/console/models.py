"""The typed models of the console's own routes (routes.py), as api/models.py is for the
core API: each request is checked with its model (fields.parse, fields.parse_query) and
each model's schema is what /openapi.json shows (openapi.schemas), so the document and
the server cannot disagree (tests/server/test_server_schema.py holds them to it).
"""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import UNSET, Meta, Struct, UnsetType

from ...schedules.timing import MAX_CRON, MAX_ZONE
from ..api.models import BrokenSchedule, Job, Limit, Schedule, Scope, State
from ..topics.topic import Backoff

SEARCH_WINDOW = 1000  # jobs per state a search looks at unless told otherwise
MAX_WINDOW = 10_000
MAX_IDS = 1000  # dead letters one retry-batch request may name

Window = Annotated[int, Meta(ge=1, le=MAX_WINDOW)]
Attempts = Annotated[int, Meta(ge=1, le=1000)]


# -- requests ----------------------------------------------------------------------------------


class SearchQuery(Struct, forbid_unknown_fields=True):
    """Jobs by state, queue, task and id/key text, over the newest `window` of each state."""

    state: State | UnsetType = UNSET
    queue: str | UnsetType = UNSET
    task: str = ""
    q: str = ""
    limit: Limit = 100
    window: Window = SEARCH_WINDOW


class RetryBatchRequest(Struct, forbid_unknown_fields=True):
    """The dead letters to retry, by id."""

    ids: Annotated[list[str], Meta(min_length=1, max_length=MAX_IDS)]


class ConditionTrial(Struct, forbid_unknown_fields=True):
    """A retry condition tried on a sample answer (the callback's body as sent)."""

    answer: str
    condition: Annotated[str, Meta(max_length=2000, extra_json_schema={"format": "retry-condition"})] | None = None
    status: Annotated[int, Meta(ge=100, le=599)] | None = None


class CronTrial(Struct, forbid_unknown_fields=True):
    """A cron expression (and its zone) as the schedule form has it, to show what it means."""

    cron: Annotated[str, Meta(max_length=MAX_CRON, extra_json_schema={"format": "cron"})]
    tz: Annotated[str, Meta(max_length=MAX_ZONE, extra_json_schema={"format": "time-zone"})] | None = None


class CronPreview(Struct):
    described: Annotated[str, Meta(description="The expression and its next ticks on its zone's clock.")]
    next: Annotated[list[float], Meta(description="The next five ticks (Unix seconds).")]


class BackoffTrial(Struct, forbid_unknown_fields=True):
    """A topic's backoff, and how many attempts to preview."""

    backoff: Backoff
    attempts: Attempts | None = None


# -- answers -----------------------------------------------------------------------------------


class WhoAmI(Struct):
    auth: bool
    scope: Scope


class SearchAnswer(Struct):
    jobs: list[Job]
    matched: int
    scanned: int
    window: int
    complete: bool
    tasks: list[str] = []


class Lease(Struct):
    id: str
    state: State
    now: float
    worker: str | None = None
    lease_until: float | None = None


class RetriedBatch(Struct):
    retried: int
    not_retried: list[str]


class RunningJob(Struct):
    id: str
    task: str
    running_for: float
    progress: Annotated[float | None, Meta(description="0 to 1: what the task last reported (null: none).")] = None
    progress_message: str | None = None


class Worker(Struct):
    worker: str
    pid: int
    host: str
    queues: list[str]
    heartbeat_age: float
    jobs: list[RunningJob]
    concurrency: int | None = None
    processed: int | None = None
    seen: float | None = None
    master: str | None = None
    quiet: Annotated[bool, Meta(description="Ordered quiet: it takes no new job.")] = False
    stopping: Annotated[bool, Meta(description="Stopping: it exits once its running jobs finish.")] = False


class WorkerOrder(Struct):
    worker: str
    order: Annotated[str, Meta(description="quiet or stop")]
    by: Annotated[str, Meta(description="Who gave it: a token's id and note.")]
    at: float


class Workers(Struct):
    time: float
    workers: list[Worker]
    masters: list[dict[str, Any]]


class PeriodicSchedules(Struct):
    now: float
    schedules: list[Schedule]  # as GET /v1/schedules shows them
    broken: list[BrokenSchedule]  # stored records that cannot be fired, and why
    masters: int  # masters running now
    leader: str | None = None  # the process firing schedules now (None: none does)


class DeclaredLimit(Struct):
    rate: str | None
    rate_key: Annotated[str | None, Meta(description="A key per call, like customer:{customer_id}.")]
    concurrency: int | None
    concurrency_key: str | None


class SetLimit(Struct):
    rate: str | None
    concurrency: int | None


class LimitInForce(Struct):
    name: Annotated[str, Meta(description="A task's name, a limit key, or queue:NAME.")]
    kind: Annotated[str, Meta(description="task, key or queue")]
    queue: Annotated[str | None, Meta(description="The queue limited, or the declaring task's queue.")]
    declared: Annotated[DeclaredLimit | None, Meta(description="What the code declares (from the workers' "
                                                   "heartbeats).")]
    set: Annotated[SetLimit | None, Meta(description="Set at run time: it wins over the declared one.")]
    paused_for: Annotated[float | None, Meta(description="Seconds left of a pause.")]
    rate: Annotated[str | None, Meta(description="The rate in force.")]
    concurrency: Annotated[int | None, Meta(description="The concurrency in force.")]
    running: Annotated[int | None, Meta(description="Slots held now (null: per key, or no concurrency).")]
    recent_per_s: Annotated[float | None, Meta(description="Runs a second over the last one to two minutes "
                                                "(null: a key's).")]


class LimitsInForce(Struct):
    time: float
    limits: list[LimitInForce]


class StoreHealth(Struct):
    kind: str
    url: str
    up: bool
    pings_ms: list[float]
    backend: str | None = None
    latency_ms: float | None = None
    clock_skew_ms: float | None = None
    error: str | None = None


class Verdict(Struct):
    retry: bool
    reason: str | None


class RetryWait(Struct):
    attempt: int
    wait: float
    wait_min: float
    after: float


class BackoffPreview(Struct):
    retries: list[RetryWait]


class AlertTarget(Struct):
    target: str
    delivered: bool
    status: str  # "delivered", "refused by the network policy: ...", "connection failed: ..."
    error: str | None = None  # the status when not delivered


class TestAlert(Struct):
    sent: bool
    targets: list[AlertTarget]
    message: str


MODELS: tuple[Any, ...] = (
    RetryBatchRequest, ConditionTrial, CronTrial, CronPreview, BackoffTrial, WhoAmI,
    SearchAnswer, Lease, RetriedBatch, WorkerOrder,
    Workers, PeriodicSchedules, LimitsInForce, StoreHealth, Verdict, BackoffPreview, TestAlert,
)
