"""The job record: one immutable value shared by every backend, and its JSON envelope."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import MISSING, asdict, dataclass, field, fields
from enum import StrEnum
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Generic, cast

import orjson

from .codec import find_nul, shown
from .errors import ConfigError, PayloadError

if TYPE_CHECKING:  # a type checker reads Job as Job[Any] (a job of unknown result type)
    from typing_extensions import TypeVar

    R = TypeVar("R", default=Any)
else:  # TypeVar's default is Python 3.13's; at run time it changes nothing
    from typing import TypeVar

    R = TypeVar("R")


class JobState(StrEnum):
    """Where a job is in its life cycle (see DESIGN.md)."""

    BLOCKED = "blocked"  # waiting for the jobs it runs after (options(after=...)) to settle
    SCHEDULED = "scheduled"  # waiting for its due time (first run or a retry)
    QUEUED = "queued"  # due, waiting for a worker
    ACTIVE = "active"  # leased by a worker; the lease is renewed while it runs
    SUCCEEDED = "succeeded"  # done; kept for the result retention period
    DEAD = "dead"  # attempts used up (or unrunnable); kept until retried or purged
    CANCELLED = "cancelled"  # cancelled (before it ran, or stopped on request while running), or expired

    @property
    def finished(self) -> bool:
        return self in FINISHED_STATES


WAITING_STATES = frozenset({JobState.SCHEDULED, JobState.QUEUED})
UNFINISHED_STATES = WAITING_STATES | {JobState.ACTIVE, JobState.BLOCKED}
FINISHED_STATES = frozenset({JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED})
ALL_STATES = tuple(JobState)


# A task's defaults (options.TaskDefaults): here, so that a store can leave them out of
# what it writes and fill them in when it reads (backends/redis/codec.py).
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_TIMEOUT = 300.0


class Priority:
    """Priorities are stored as small integers: lower runs earlier."""

    HIGH, NORMAL, LOW = 0, 1, 2
    NAMES = {"high": HIGH, "normal": NORMAL, "low": LOW}
    LEVELS = (HIGH, NORMAL, LOW)

    @classmethod
    def parse(cls, value: str | int) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and value in cls.LEVELS:
            return value
        if isinstance(value, str) and value.lower() in cls.NAMES:
            return cls.NAMES[value.lower()]
        raise ValueError(f"unknown priority {value!r}: use 'high', 'normal' or 'low'")

    @classmethod
    def name(cls, level: int) -> str:
        return ("high", "normal", "low")[level]


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]  # every 10-bit value as 2 characters
_id_lock = threading.Lock()
_last_id = [0, 0]  # [milliseconds, randomness] of the last id made in this process


def _reserve_ids(count: int) -> int:
    """The 130-bit value of the first of `count` ids that follow each other (ids are
    value, value + 4, ...): 48 bits of milliseconds, then 80 bits that grow within a
    millisecond, then 2 zero bits."""
    ms = time.time_ns() // 1_000_000
    with _id_lock:
        if ms <= _last_id[0]:
            ms, rand = _last_id[0], _last_id[1] + 1
        else:
            rand = int.from_bytes(os.urandom(10), "big") >> 1  # room to count upwards
        _last_id[0], _last_id[1] = ms, rand + count - 1
    return (ms << 82) | (rand << 2)


def new_job_id() -> str:
    """A ULID-like id: 48 bits of milliseconds, then 80 bits that grow within a millisecond.

    26 Crockford base-32 characters; ids sort by creation time, and within one
    process by creation order.
    """
    value = _reserve_ids(1)  # 130 bits: 13 pairs of characters
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in range(120, -1, -10)])


def new_job_ids(count: int) -> list[str]:
    """`count` ids as `new_job_id` makes them, one after another, for a batch: the first
    22 characters are written once per 2**18 ids, then 2 pairs per id."""
    if count == 1:  # task.enqueue(): new_job_id is quicker for one
        return [new_job_id()]
    value, ids = _reserve_ids(count), list[str]()
    while len(ids) < count:
        head = "".join([_PAIRS[(value >> shift) & 1023] for shift in range(120, 19, -10)])
        low = value & 0xFFFFF  # the last 20 bits: 2 pairs
        end = min(low + 4 * (count - len(ids)), 0x100000)  # up to where the head changes
        ids += [head + _PAIRS[tail >> 10] + _PAIRS[tail & 1023] for tail in range(low, end, 4)]
        value += end - low
    return ids


@dataclass(frozen=True, slots=True)
class Origin:
    """The App a job handle came from, as the handle needs it: its `wait` and
    `wait_async`, bound. One per App; a job carries it beside its fields."""

    wait: Callable[[str, float | None], Any]
    wait_async: Callable[[str, float | None], Awaitable[Any]]


class _Held:
    """A slot beside the job's fields for its Origin: never stored, compared, copied
    or pickled (the dataclass's methods see only fields)."""

    __slots__ = ("_origin",)


_set_origin = _Held.__dict__["_origin"].__set__


@dataclass(frozen=True, slots=True)
class Job(_Held, Generic[R]):
    """A job as the store knows it. Backends build these; nobody mutates them.

    `R` is its task's return type (`Task[P, R].enqueue` gives a `Job[R]`), what `wait`
    returns. A job an App returns (enqueue, get) knows that App: `wait` asks its store
    and no other.
    """

    id: str
    task: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    queue: str = "default"
    priority: int = Priority.NORMAL
    state: JobState = JobState.QUEUED
    attempts: int = 0
    max_attempts: int = 3
    timeout: float | None = None
    key: str | None = None
    run_at: float = 0.0  # epoch seconds, store clock
    created_at: float = 0.0
    lease_until: float | None = None
    worker: str | None = None
    error: str | None = None
    result: Any = None
    finished_at: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # carried for middleware (e.g. trace context)
    progress: float | None = None  # 0..1, the last that the task reported (current_job().progress)
    progress_message: str | None = None
    cancel_requested: bool = False  # someone asked this active job to stop (app.cancel)
    expires_at: float | None = None  # not started by then: never run, ends cancelled ("expired")
    updated_at: float | None = None  # when the job last changed (state, lease, remark)
    remark: str | None = None  # free text for people (the MySQL seed's remark, S1-3)
    last_worker: str | None = None  # the worker that last leased it; kept after it ends

    @property
    def priority_name(self) -> str:
        return Priority.name(self.priority)

    def with_state(self, state: JobState | str, **changes: Any) -> Job:
        return self.evolve(state=JobState(state), **changes)

    def evolve(self, **changes: Any) -> Job:
        """A copy with some fields changed (dataclasses.replace, several times faster:
        every field read in one C call, then the changed ones set by position)."""
        values = list(_ALL_FIELDS(self))
        for name, value in changes.items():
            values[_FIELD_INDEX[name]] = value
        return Job(*values)

    def wait(self, timeout: float | None = None) -> R:
        """This job's result once it has finished, decoded to its task's return annotation;
        `deferq.JobFailed` if it went dead or was cancelled, TimeoutError past `timeout`."""
        return cast(R, self._from().wait(self.id, timeout))

    async def wait_async(self, timeout: float | None = None) -> R:
        """`wait` for asyncio code."""
        return cast(R, await self._from().wait_async(self.id, timeout))

    def _from(self) -> Origin:
        origin: Origin | None = getattr(self, "_origin", None)
        if origin is None:
            raise ConfigError(f"job {self.id} came from no App (built or copied by hand): "
                              f"wait for it with app.wait({self.id!r})")
        return origin

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["args"] = list(self.args)
        data["state"] = str(self.state)
        data["priority"] = self.priority_name
        return data


def slot_init(cls: type[Any]) -> None:
    """Give a frozen slots dataclass a faster `__init__`, same parameters and defaults.
    Every job read or stored builds one, and an enqueue two.

    The instance briefly becomes a twin class with the same slots and no frozen
    `__setattr__`, so each field is a plain attribute store (a third of the cost of
    setting each slot through its descriptor, a sixth of the dataclass's own
    `object.__setattr__` by name). A subclass (its layout may differ) is set through
    the descriptors. A `__post_init__` is called last, as the dataclass's would."""
    names = [f.name for f in fields(cls)]
    bases = tuple(base for base in cls.__bases__ if base is not Generic)  # Generic: no layout of its own
    if any(hasattr(base, "__dataclass_fields__") for base in bases) or tuple(cls.__slots__) != tuple(names):
        raise TypeError(f"slot_init needs a slots dataclass of its own fields, no base's: {cls.__name__}")
    twin = type(f"_{cls.__name__}Twin", bases, {"__slots__": tuple(names)})
    params: list[str] = []
    fast: list[str] = []
    slow: list[str] = []
    scope: dict[str, Any] = {"_MISSING": object(), "_cls": cls, "_twin": twin, "_become": object.__setattr__}
    for i, f in enumerate(fields(cls)):
        scope[f"_set{i}"] = cls.__dict__[f.name].__set__
        value = f.name
        if f.default_factory is not MISSING:
            scope[f"_make{i}"] = f.default_factory
            params.append(f"{f.name}=_MISSING")
            value = f"_make{i}() if {f.name} is _MISSING else {f.name}"
        elif f.default is not MISSING:
            scope[f"_default{i}"] = f.default
            params.append(f"{f.name}=_default{i}")
        else:
            params.append(f.name)
        fast.append(f"        self.{f.name} = {value}")
        slow.append(f"        _set{i}(self, {value})")
    source = "\n".join([
        f"def __init__(self, {', '.join(params)}):",
        "    if type(self) is _cls:",
        "        _become(self, '__class__', _twin)",
        *fast,
        "        self.__class__ = _cls",
        "    else:",
        *slow,
        *(["    self.__post_init__()"] if hasattr(cls, "__post_init__") else []),
    ])
    exec(source, scope)  # noqa: S102 - our own field names, nothing from outside
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init


slot_init(Job)
JOB_FIELDS = tuple(Job.__dataclass_fields__)


def fresh_job(
    id: str, task: str, args: tuple[Any, ...], kwargs: dict[str, Any], queue: str, priority: int, state: JobState,
    max_attempts: int, timeout: float | None, key: str | None, run_at: float, created_at: float,
    meta: dict[str, Any], expires_at: float | None, updated_at: float | None, remark: str | None,
) -> Job:
    """A job never run: these fields, every other at its default. By position, a third
    cheaper than by name: every job a producer enqueues is built this way, twice."""
    return Job(
        id, task, args, kwargs, queue, priority, state, 0, max_attempts, timeout, key, run_at, created_at,
        None, None, None, None, None, meta, None, None, False, expires_at, updated_at, remark, None,
    )




def held(jobs: list[Job], origin: Origin) -> list[Job]:
    """`jobs`, each now knowing the App they came from (`Job.wait`)."""
    for job in jobs:
        _set_origin(job, origin)
    return jobs

_ALL_FIELDS = attrgetter(*JOB_FIELDS)
_FIELD_INDEX = {name: i for i, name in enumerate(JOB_FIELDS)}


def dumps(value: Any, what: str = "value") -> bytes:
    """Encode to JSON, naming the value that cannot be encoded."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError as exc:
        raise PayloadError(f"{what} is not JSON-serializable: {exc}") from None


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)


def encode_payload(
    task: str, args: tuple[Any, ...], kwargs: dict[str, Any], meta: dict[str, Any] | None = None
) -> bytes:
    """`[args, kwargs]` (or `[args, kwargs, meta]`) as JSON; refuses, by name, arguments
    that JSON cannot carry."""
    try:
        payload = orjson.dumps((args, kwargs, meta) if meta else (args, kwargs))
    except TypeError:
        pass  # find and name the culprit
    else:
        if b"\\u0000" in payload:  # rare: then look for a NUL (not an escaped backslash before u0000)
            _refuse_nul(task, args, kwargs)
        return payload
    for i, value in enumerate(args):
        _check_json(value, f"argument {i} of {task}()")
    for name, value in kwargs.items():
        _check_json(value, f"argument {name!r} of {task}()")
    raise PayloadError(f"the arguments of {task}() are not JSON-serializable")


def decode_payload(payload: bytes | str) -> tuple[tuple[Any, ...], dict[str, Any], dict[str, Any]]:
    """(args, kwargs, meta) of a stored payload; ValueError if it is not one."""
    decoded = orjson.loads(payload)
    if type(decoded) is not list or len(decoded) not in (2, 3):
        raise ValueError("payload is not [args, kwargs] or [args, kwargs, meta]")
    args, kwargs, *rest = decoded
    meta = rest[0] if rest else {}
    if type(args) is not list or type(kwargs) is not dict or type(meta) is not dict:
        raise ValueError("payload is not [args, kwargs] or [args, kwargs, meta]")
    return tuple(args), kwargs, meta


def _refuse_nul(task: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """PayloadError naming the argument that holds NUL, which PostgreSQL cannot store:
    refused on every store, so a job that runs on one runs on all."""
    for name, value in [*enumerate(args), *kwargs.items()]:
        found = find_nul(value)
        if found is not None:
            where = shown(found[0], f"argument {name!r} of {task}()")
            raise PayloadError(f"{where} {'is a key that holds' if found[1] else 'holds'} the NUL character "
                               "(\\u0000), which deferq does not store: remove it or encode it")


def _check_json(value: Any, where: str) -> None:
    try:
        orjson.dumps(value)
    except TypeError:
        raise PayloadError(
            f"{where} is {type(value).__name__} {value!r:.60}, which is not JSON-serializable"
        ) from None
