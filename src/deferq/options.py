"""The one option schema: every job and task option, defined once.

`TaskDefaults` holds what `@app.task(...)` may set; `JobOptions` what a producer may set
per job (`task.options(...)`, `app.enqueue(..., **options)`, periodic jobs, the HTTP API).
Each field carries an `Option` in its metadata: how to check a value, a line of help,
and whether periodic jobs and the HTTP API take it (and under which JSON name). Every
list of option names elsewhere derives from these two classes, so a new option is a new
field here plus its column in the stores: nothing else lists names.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple, TypedDict

from . import backoff as backoff_module
from .backends.base import OnConflict
from .job import DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT, Job, Priority
from .values import LATEST_DUE, MAX_DELAY, Rate, key_template, rate_option, slots, storable

# Patterns of the HTTP fragments below, so that every value the API's schema allows is
# one the check accepts (the API's typed models and its OpenAPI document use them).
_YEAR = r"(?:197[1-9]|19[89][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])"
_MONTH_DAY = (r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
              r"|02-(?:0[1-9]|1[0-9]|2[0-8]))")
_LEAP_DAY = r"(?:[2-9][0-9](?:0[48]|[2468][048]|[13579][26])|(?:[2468][048]|[3579][26])00)-02-29"
_TIME = r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
# Years 1971-9998, so that no zone offset takes a time out of the 1970-9999 that `at` allows.
DUE_TIME = f"^(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_DAY}){_TIME}$"
QUEUE_NAME = r"^[^{}\x00 ]+$"
NO_NUL = r"^[^\x00]*$"  # PostgreSQL cannot store NUL: refused in text on every store
TAG = r"^[^\x00-\x1f\x7f\",\\]{1,100}$"  # JSON writes it as itself: a store finds a tag by its text
PATTERN_WORDS = {DUE_TIME: "an ISO 8601 time with a zone, like 2030-01-01T09:00:00Z (years 1971-9998)",
                 QUEUE_NAME: "1-100 characters without spaces or braces",
                 TAG: "1-100 characters without control characters, quotes, backslashes or commas",
                 NO_NUL: "text without the NUL character (\\u0000)"}


def seconds(value: Any, name: str = "delay") -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be seconds or a timedelta, got {value!r:.60}")
    if not 0 <= value <= MAX_DELAY:
        raise ValueError(f"{name} must be between 0 and {MAX_DELAY:g} seconds, got {value}")
    return float(value)


def epoch(value: Any, name: str = "at") -> float:
    """A due time: an aware datetime, an ISO 8601 string with a zone, or epoch seconds.
    One bound for every form (no year 9999)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{name} must be epoch seconds or an ISO 8601 time, got {value!r:.60}") from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"{name} needs a time zone (e.g. datetime.now(UTC) or 2030-01-01T09:00:00Z)")
        value = value.timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a datetime, an ISO 8601 time or epoch seconds, got {value!r:.60}")
    if not 0 <= value < LATEST_DUE:
        raise ValueError(f"{name} must be between 1970 and 9999, got {value}")
    return float(value)


class Expiry(NamedTuple):
    """When a job expires: at an instant, or within some seconds of being stored."""

    at: float | None = None
    within: float | None = None


def expiry(value: Any, name: str = "expires") -> Expiry:
    """An aware datetime or an ISO 8601 time with a zone: then. Seconds or a timedelta:
    that long after the job is stored (by the store's clock)."""
    if isinstance(value, datetime | str):
        return Expiry(at=epoch(value, name))
    if isinstance(value, Expiry):
        return value
    return Expiry(within=seconds(value, name))


ON_CONFLICT = tuple(mode.value for mode in OnConflict)


def conflict_mode(value: Any, name: str = "on_conflict") -> OnConflict:
    if value not in ON_CONFLICT:
        raise ValueError(f"{name} must be one of {', '.join(ON_CONFLICT)}, got {value!r:.60}")
    return OnConflict(value)


def window_rules(unique_for: float | None, key: str | None) -> float | None:
    """The deduplication window of a job with these options, or ValueError."""
    if unique_for and key is None:
        raise ValueError("unique_for needs a key: options(key=..., unique_for=...)")
    return unique_for or None


def conflict_rules(on_conflict: OnConflict | None, key: str | None, max_wait: float | None) -> OnConflict:
    """The on_conflict mode of a job with these options, or ValueError."""
    mode = on_conflict or OnConflict.IGNORE
    if mode is not OnConflict.IGNORE and key is None:
        raise ValueError(f"on_conflict={mode.value!r} needs a key: options(key=..., on_conflict={mode.value!r})")
    if max_wait is not None and mode is not OnConflict.DEBOUNCE:
        raise ValueError("max_wait is for on_conflict='debounce'")
    return mode


def positive(value: Any, name: str = "timeout") -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r:.60}")
    return float(value)


def attempts(value: Any, name: str = "max_attempts") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
        raise ValueError(f"{name} must be a whole number from 1 to 1000, got {value!r:.60}")
    return value


def queue_name(value: Any, name: str = "queue") -> str:
    if (not isinstance(value, str) or not value or len(value) > 100 or any(c in value for c in "{}\0 ")
            or not storable(value)):
        raise ValueError(f"queue name {value!r:.60} must be 1-100 characters without spaces or braces")
    return value


def priority(value: Any, name: str = "priority") -> int:
    return Priority.parse(value)


def unique_key(value: Any, name: str = "key") -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= 200 or not storable(value):
        raise ValueError(f"{name} must be a string of 1-200 characters without NUL or a lone surrogate, "
                         f"got {value!r:.60}")
    return value


MAX_REMARK = 1000


def remark_text(value: Any, name: str = "remark") -> str:
    if not isinstance(value, str) or len(value) > MAX_REMARK or "\0" in value:
        raise ValueError(f"{name} must be text of at most {MAX_REMARK} characters without NUL, got {value!r:.60}")
    return value


MAX_TAGS = 20
def tag_list(value: Any, name: str = "tags") -> tuple[str, ...]:
    """Up to 20 labels (one text is one label), in the order given, each once."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or len(items) > MAX_TAGS or not all(
            isinstance(tag, str) and re.fullmatch(TAG, tag) for tag in items):
        raise ValueError(f"{name} must be up to {MAX_TAGS} texts of {PATTERN_WORDS[TAG]}, got {value!r:.60}")
    return tuple(dict.fromkeys(items))


MAX_FAIR_WEIGHT = 1000.0


def fair_weight(value: Any, name: str = "fair_weight") -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_FAIR_WEIGHT:
        raise ValueError(f"{name} must be a number above 0 and at most {MAX_FAIR_WEIGHT:g}, got {value!r:.60}")
    return float(value)


def backoff_fn(value: Any, name: str = "backoff") -> Callable[[int], float]:
    if not callable(value):
        raise ValueError(f"{name} must be a callable (attempt) -> seconds, e.g. backoff.fixed(5)")
    return value  # type: ignore[no-any-return]  # callable() narrows to Callable[..., object]


def parents(value: Any, name: str = "after") -> tuple[str, ...]:
    """Jobs or job ids (a list, or one) as a tuple of ids."""
    items = value if isinstance(value, list | tuple | set | frozenset) else [value]
    ids: list[Any] = [getattr(item, "id", item) for item in items]
    if not all(isinstance(i, str) and 1 <= len(i) <= 64 for i in ids):
        raise ValueError(f"{name} takes jobs or job ids, got {value!r:.60}")
    return tuple(ids)


def flag(value: Any, name: str = "durable") -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r:.60}")
    return value


def anything(value: Any, name: str = "") -> Any:
    return value


@dataclass(frozen=True)
class Option:
    """What the schema knows of one option."""

    check: Callable[[Any, str], Any]  # (value, name) -> stored value; ValueError names the problem
    help: str
    periodic: bool = False  # a periodic job may set it
    http: str | None = None  # its name in the HTTP API's JSON, if the API takes it
    http_scale: float = 1.0  # JSON value x scale = Python value (delay_ms -> seconds)
    openapi: dict[str, Any] = field(default_factory=dict)  # the JSON schema of the HTTP field


def option(default: Any, spec: Option) -> Any:
    return field(default=default, metadata={"deferq": spec})


QUEUE = Option(queue_name, "the queue the job waits in", periodic=True, http="queue",
               openapi={"type": "string", "minLength": 1, "maxLength": 100, "pattern": QUEUE_NAME})
PRIORITY = Option(priority, "high, normal or low (weighted 5:3:2 by default)", periodic=True,
                  http="priority", openapi={"type": "string", "enum": list(Priority.NAMES)})
MAX_ATTEMPTS = Option(attempts, "runs before the job goes dead", periodic=True, http="max_attempts",
                      openapi={"type": "integer", "minimum": 1, "maximum": 1000})
TIMEOUT = Option(positive, "seconds an attempt may run (the seeds' ttr)", periodic=True, http="ttr",
                 openapi={"type": "number", "exclusiveMinimum": True, "minimum": 0, "maximum": 86400})


TAGS = Option(tag_list, "labels kept with the job (a job's own replace its task's)",
              periodic=True, http="tags", openapi={"type": "array", "maxItems": MAX_TAGS, "items": {
                  "type": "string", "minLength": 1, "maxLength": 100, "pattern": TAG}})
FAIR_WEIGHT = Option(fair_weight, "the fair key's share of its queue: weight 2 is served twice as often as 1",
                     periodic=True, http="fair_weight",
                     openapi={"type": "number", "exclusiveMinimum": True, "minimum": 0,
                              "maximum": MAX_FAIR_WEIGHT})
DUE_AT = {"description": "Due time: epoch seconds or ISO 8601 with a zone.",
          "oneOf": [{"type": "number", "minimum": 0, "exclusiveMaximum": LATEST_DUE},
                    {"type": "string", "pattern": DUE_TIME}]}


@dataclass(frozen=True)
class TaskDefaults:
    """What `@app.task(...)` sets for every job of the task."""

    queue: str = option("default", QUEUE)
    priority: int = option(Priority.NORMAL, PRIORITY)
    max_attempts: int = option(DEFAULT_MAX_ATTEMPTS, MAX_ATTEMPTS)
    timeout: float | None = option(DEFAULT_TIMEOUT, TIMEOUT)
    backoff: Callable[[int], float] = option(backoff_module.DEFAULT, Option(backoff_fn, "seconds before retry n"))
    rate: Rate | None = option(None, Option(rate_option, 'runs per period across all workers, e.g. "100/m"'))
    rate_key: str | None = option(None, Option(key_template, "one rate per key, named from the call's "
                                               'arguments, e.g. "customer:{customer_id}"'))
    concurrency: int | None = option(None, Option(slots, "jobs of the task (or of one key) running at once, "
                                                  "across all workers"))
    concurrency_key: str | None = option(None, Option(
        key_template, "one concurrency limit per key, named from the call's arguments, "
        'e.g. "customer:{customer_id}"'))
    tags: tuple[str, ...] = option((), TAGS)
    fair_key: str | None = option(None, Option(
        key_template, "fair queueing: the queue serves the keys with work round-robin; named from the "
        'call\'s arguments, e.g. "customer:{customer_id}"'))
    fair_weight: float = option(1.0, FAIR_WEIGHT)
    encrypt: bool | None = option(None, Option(
        flag, "encrypt its jobs' arguments, results and errors at rest (None: as the App's Encryption says)"))

    @classmethod
    def parse(cls, **options: Any) -> TaskDefaults:
        checked = cls(**_checked(cls, options, "task option"))
        if checked.rate_key is not None and checked.rate is None:
            raise ValueError("rate_key needs a rate: @app.task(rate=\"10/s\", rate_key=...)")
        if checked.concurrency_key is not None and checked.concurrency is None:
            raise ValueError("concurrency_key needs a concurrency: @app.task(concurrency=1, concurrency_key=...)")
        return checked


@dataclass(frozen=True)
class JobOptions:
    """What a producer may choose per job. `None` means "the task's default"."""

    delay: float = option(0.0, Option(seconds, "seconds from now until the job is due", http="delay_ms",
                                      http_scale=0.001, openapi={"type": "integer", "minimum": 0,
                                                                      "maximum": int(MAX_DELAY * 1000)}))
    at: float | None = option(None, Option(epoch, "when the job is due (aware datetime or epoch)", http="at",
                                           openapi=DUE_AT))
    queue: str | None = option(None, QUEUE)
    priority: int | None = option(None, PRIORITY)
    max_attempts: int | None = option(None, MAX_ATTEMPTS)
    timeout: float | None = option(None, TIMEOUT)
    key: str | None = option(None, Option(unique_key, "unique key: one unfinished job per key", http="key",
                                          openapi={"type": "string", "minLength": 1, "maxLength": 200,
                                                   "pattern": NO_NUL}))
    expires: Expiry | None = option(None, Option(
        expiry, "not started by then, never run: an aware datetime, or seconds after enqueue",
        periodic=True, http="expires",
        openapi={"description": "The job is never run if not started by then (it ends cancelled, "
                 "'expired'): seconds after it is stored, or an ISO 8601 time with a zone.",
                 "oneOf": [{"type": "number", "minimum": 0, "maximum": MAX_DELAY},
                           {"type": "string", "pattern": DUE_TIME}]}))
    on_conflict: OnConflict | None = option(None, Option(
        conflict_mode, "when a job with the key waits: ignore (keep it), replace (its arguments and due "
        "time), debounce (also push its due time back by the delay)", http="on_conflict",
        openapi={"type": "string", "enum": list(ON_CONFLICT)}))
    max_wait: float | None = option(None, Option(
        seconds, "debounce: the longest a job waits after its first enqueue",
        http="max_wait_ms", http_scale=0.001,
        openapi={"type": "integer", "minimum": 0, "maximum": int(MAX_DELAY * 1000)}))
    unique_for: float | None = option(None, Option(
        seconds, "with key: a job with the key that succeeded this recently is returned instead of a new one",
        http="unique_for_ms", http_scale=0.001,
        openapi={"type": "integer", "minimum": 0, "maximum": int(MAX_DELAY * 1000)}))
    remark: str | None = option(None, Option(
        remark_text, "free text kept with the job for people (shown by `deferq job` and the console)",
        periodic=True, http="remark",
        openapi={"type": "string", "maxLength": MAX_REMARK, "pattern": NO_NUL}))
    durable: bool | None = option(None, Option(
        flag, "false: the enqueue's commit does not wait for the disk (PostgreSQL: synchronous_commit=off); "
        "may lose the last moments of jobs if the database server crashes", http="durable",
        openapi={"type": "boolean"}))
    connection: Any = option(None, Option(anything, "your open database connection (transactional enqueue)"))
    tags: tuple[str, ...] | None = option(None, TAGS)
    fair_key: str | None = option(None, Option(
        unique_key, "fair queueing: the job's key among the keys its queue serves round-robin "
        "(replaces the task's fair_key template)", periodic=True, http="fair_key",
        openapi={"type": "string", "minLength": 1, "maxLength": 200, "pattern": NO_NUL}))
    fair_weight: float | None = option(None, FAIR_WEIGHT)
    after: tuple[str, ...] = option((), Option(
        parents, "jobs (or their ids) this one runs after: it waits, blocked, until they all succeed"))
    after_any_outcome: bool = option(False, Option(
        flag, "with after: run once they have all finished, even if one went dead or was cancelled"))

    @classmethod
    def parse(cls, **options: Any) -> JobOptions:
        return cls(**_checked(cls, options, "option"))

    def merged(self, other: JobOptions) -> JobOptions:
        """These options overridden by whatever `other` sets."""
        changes = {
            f.name: getattr(other, f.name) for f in fields(other) if getattr(other, f.name) != f.default
        }
        return replace(self, **changes)


PriorityName = Literal["high", "normal", "low"]
Seconds = float | timedelta
When = datetime | str | float  # an aware datetime, ISO 8601 with a zone, or epoch seconds


class TaskOptions(TypedDict, total=False):
    """The keywords of `@app.task(...)`: the fields of `TaskDefaults` as a caller writes
    them, so that a type checker refuses a misspelt one (tests/contract/test_record.py
    holds the names to the dataclass)."""

    queue: str
    priority: PriorityName | int
    max_attempts: int
    timeout: Seconds | None
    backoff: Callable[[int], float]
    rate: str | Rate | None
    rate_key: str | None
    concurrency: int | None
    concurrency_key: str | None
    tags: str | Sequence[str]
    fair_key: str | None
    fair_weight: float
    encrypt: bool | None


class JobOptionsKw(TypedDict, total=False):
    """The keywords of `task.options(...)` and `app.enqueue(...)`: the fields of
    `JobOptions` as a caller writes them (None: the task's default)."""

    delay: Seconds
    at: When | None
    queue: str | None
    priority: PriorityName | int | None
    max_attempts: int | None
    timeout: Seconds | None
    key: str | None
    expires: When | timedelta | None
    on_conflict: Literal["ignore", "replace", "debounce"] | None
    max_wait: Seconds | None
    unique_for: Seconds | None
    remark: str | None
    durable: bool | None
    connection: Any
    tags: str | Sequence[str] | None
    fair_key: str | None
    fair_weight: float | None
    after: Job | str | Sequence[Job | str]
    after_any_outcome: bool


def specs(cls: type[Any]) -> Iterator[tuple[str, Option]]:
    """(name, Option) of every option of `cls` (TaskDefaults or JobOptions)."""
    for f in fields(cls):
        yield f.name, f.metadata["deferq"]


def names(cls: type[Any]) -> tuple[str, ...]:
    return tuple(name for name, _ in specs(cls))


PERIODIC_OPTIONS = tuple(name for name, spec in specs(JobOptions) if spec.periodic)


class PeriodicOptions(TypedDict, total=False):
    """The job options of `@app.periodic(...)`: those of `JobOptionsKw` a schedule's
    jobs may set (`PERIODIC_OPTIONS`; tests/contract/test_record.py holds the two together)."""

    queue: str | None
    priority: PriorityName | int | None
    max_attempts: int | None
    timeout: Seconds | None
    expires: When | timedelta | None
    remark: str | None
    tags: str | Sequence[str] | None
    fair_key: str | None
    fair_weight: float | None
HTTP_OPTIONS = {spec.http: (name, spec) for name, spec in specs(JobOptions) if spec.http}


def _checked(cls: type[Any], options: dict[str, Any], what: str) -> dict[str, Any]:
    """`options` checked against `cls`'s schema; None keeps a per-job option unset."""
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"unknown {what} {unknown[0]!r}: {what}s are {', '.join(known)}")
    checked = {}
    for name, value in options.items():
        nullable = "None" in str(known[name].type)  # `float | None`: None is a valid value
        checked[name] = None if value is None and nullable else known[name].metadata["deferq"].check(value, name)
    return checked
