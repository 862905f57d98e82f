"""The job record: one immutable value shared by every backend, and its JSON envelope."""

from __future__ import annotations

import inspect
import os
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import MISSING, asdict, dataclass, field, fields
from enum import StrEnum
from itertools import repeat
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
_entropy = bytearray()  # os.urandom read 4,000 bytes at a time: one system call per 400 milliseconds with ids


def _forked() -> None:
    """A child process draws its own randomness: never the parent's next ids."""
    _last_id[0] = 0
    _entropy.clear()


os.register_at_fork(after_in_child=_forked)


def _reserve_ids(count: int) -> int:
    """The 130-bit value of the first of `count` ids that follow each other (ids are
    value, value + 4, ...): 48 bits of milliseconds, then 80 bits that grow within a
    millisecond, then 2 zero bits."""
    ms = time.time_ns() // 1_000_000
    with _id_lock:
        if ms <= _last_id[0]:
            ms, rand = _last_id[0], _last_id[1] + 1
        else:
            if len(_entropy) < 10:
                _entropy[:] = os.urandom(4000)
            rand = int.from_bytes(_entropy[-10:], "big") >> 1  # room to count upwards
            del _entropy[-10:]
        _last_id[0], _last_id[1] = ms, rand + count - 1
    return (ms << 82) | (rand << 2)


_LOW_70 = (1 << 70) - 1


def new_job_id() -> str:
    """A ULID-like id: 48 bits of milliseconds, then 80 bits that grow within a millisecond.

    26 Crockford base-32 characters; ids sort by creation time, and within one
    process by creation order.
    """
    value = _reserve_ids(1)  # 130 bits: 13 pairs of characters, written out (a loop costs 1.6x)
    high, low, p = value >> 70, value & _LOW_70, _PAIRS  # two smaller ints: quicker shifts
    return "".join((
        p[high >> 50], p[(high >> 40) & 1023], p[(high >> 30) & 1023], p[(high >> 20) & 1023],
        p[(high >> 10) & 1023], p[high & 1023], p[low >> 60], p[(low >> 50) & 1023], p[(low >> 40) & 1023],
        p[(low >> 30) & 1023], p[(low >> 20) & 1023], p[(low >> 10) & 1023], p[low & 1023],
    ))


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


@dataclass(frozen=True)
class Stored:
    """How the stores and the HTTP API keep one field of `Job`: the record's declaration.
    Every store's row, hash and insert, and the API's job, are built from or checked
    against these (backends/sql/rows.py, tests/contract/test_record.py)."""

    column: str  # the SQL column (and Redis hash field) it is kept in; fields sharing one derive from it
    new: bool = False  # a new job sets it: `fresh_job` takes it and every store's insert writes it
    http: str | None = ""  # its name in the HTTP API's job ("" = the field's own), None: not shown
    json: bool = False  # kept as JSON text (NULL: the field's default); a tuple is a JSON array


def stored(column: str, default: Any = MISSING, *, factory: Any = MISSING, new: bool = False,
           http: str | None = "", json: bool = False) -> Any:
    """A field of the stored job record (a dataclass field that carries its `Stored`)."""
    return field(default=default, default_factory=factory, metadata={"deferq": Stored(column, new, http, json)})


@dataclass(frozen=True, slots=True)
class Origin:
    """The App a job handle came from, as the handle needs it: its `wait` and
    `wait_async`, bound. One per App; a job carries it beside its fields."""

    wait: Callable[[str, float | None], Any]
    wait_async: Callable[[str, float | None], Awaitable[Any]]


class _Held:
    """Slots beside the job's fields: its Origin, and the durable-step checkpoints its
    claim brought (`carried`): never stored, compared, copied or pickled (the
    dataclass's methods see only fields)."""

    __slots__ = ("_origin", "_checkpoints")


_set_origin = _Held.__dict__["_origin"].__set__
_set_checkpoints = _Held.__dict__["_checkpoints"].__set__


@dataclass(frozen=True, slots=True)
class Job(_Held, Generic[R]):
    """A job as the store knows it. Backends build these; nobody mutates them.

    `R` is its task's return type (`Task[P, R].enqueue` gives a `Job[R]`), what `wait`
    returns. A job an App returns (enqueue, get) knows that App: `wait` asks its store
    and no other.

    The one declaration of the stored record: each field's name, type, default, and
    in `Stored` the column it is kept in (args, kwargs and meta share the JSON payload;
    cancel_requested derives from cancel_requested_at), whether a new job sets it, and
    its name in the HTTP API. A new stored field is a field here, then its column in
    each store (see docs/development.md, "The job record")."""

    id: str = stored("id", new=True)
    task: str = stored("task", new=True)
    args: tuple[Any, ...] = stored("payload", (), new=True)
    kwargs: dict[str, Any] = stored("payload", factory=dict, new=True)
    queue: str = stored("queue", "default", new=True)
    priority: int = stored("priority", Priority.NORMAL, new=True)
    state: JobState = stored("state", JobState.QUEUED, new=True)
    attempts: int = stored("attempts", 0)
    max_attempts: int = stored("max_attempts", 3, new=True)
    timeout: float | None = stored("timeout", None, new=True, http="ttr")
    key: str | None = stored("key", None, new=True)
    run_at: float = stored("run_at", 0.0, new=True)  # epoch seconds, store clock
    created_at: float = stored("created_at", 0.0, new=True)
    lease_until: float | None = stored("lease_until", None, http=None)
    worker: str | None = stored("worker", None)
    error: str | None = stored("error", None)
    result: Any = stored("result", None, json=True)
    finished_at: float | None = stored("finished_at", None)
    # carried for middleware (e.g. trace context)
    meta: dict[str, Any] = stored("payload", factory=dict, new=True, http=None)
    progress: float | None = stored("progress", None)  # 0..1, the last the task reported
    progress_message: str | None = stored("progress_message", None)
    # someone asked this active job to stop (app.cancel)
    cancel_requested: bool = stored("cancel_requested_at", False)
    # not started by then: never run, ends cancelled ("expired")
    expires_at: float | None = stored("expires_at", None, new=True)
    updated_at: float | None = stored("updated_at", None, new=True)  # when it last changed (state, lease, remark)
    remark: str | None = stored("remark", None, new=True)  # free text for people
    last_worker: str | None = stored("last_worker", None)  # the worker that last leased it; kept after it ends
    tags: tuple[str, ...] = stored("tags", (), new=True, json=True)  # labels to find jobs by
    fair_key: str | None = stored("fair_key", None, new=True)  # its queue serves its keys round-robin
    # "<event>\t<key>" of the durable wait (job.wait_for) a scheduled job handed itself back
    # for, set by that outcome and cleared by the next: what lists filter as `waiting`
    waits_for: str | None = stored("waits_for", None, http=None)
    # the chunk call (chunks.py) that last ran it, set by that call's settle: a fresh id per
    # call, shared by the call's jobs (what lists filter by `chunk`); None for a plain task's
    chunk_call: str | None = stored("chunk_call", None)

    @property
    def waiting(self) -> bool:
        """A scheduled job in a durable wait (`job.wait_for`): shown and filtered as `waiting`."""
        return self.waits_for is not None and self.state == JobState.SCHEDULED

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


_TWINS: dict[type[Any], type[Any]] = {}  # a slot_init class -> its twin
_HELD: dict[type[Any], tuple[str, ...]] = {}  # a slot_init class -> its bases' slots (Job: _Held's)


def slot_init(cls: type[Any]) -> Callable[..., Any]:
    """Give a frozen slots dataclass a faster `__init__`, same parameters and defaults.
    Every job read or stored builds one, and an enqueue two. Returns `make`, which takes
    the same parameters and builds one of `cls` quicker still (for the hottest callers).

    The instance briefly becomes a twin class with the same slots and no frozen
    `__setattr__`, so each field is a plain attribute store (a third of the cost of
    setting each slot through its descriptor, a sixth of the dataclass's own
    `object.__setattr__` by name). A subclass (its layout may differ) is set through
    the descriptors. A `__post_init__` is called last, as the dataclass's would.
    `make` starts as the twin and changes class once, where `__init__` changes twice
    (its instance is made before it runs): ~0.45 µs less for a job's 28 fields. Slots
    its bases declare beside the fields (a Job's `_Held`) start as None: reading one
    that was never set raises inside `getattr(..., None)`, 0.25 µs a job opened."""
    names = [f.name for f in fields(cls)]
    bases = tuple(base for base in cls.__bases__ if base is not Generic)  # Generic: no layout of its own
    if any(hasattr(base, "__dataclass_fields__") for base in bases) or tuple(cls.__slots__) != tuple(names):
        raise TypeError(f"slot_init needs a slots dataclass of its own fields, no base's: {cls.__name__}")
    twin = _TWINS[cls] = type(f"_{cls.__name__}Twin", bases, {"__slots__": tuple(names)})
    _HELD[cls] = tuple(name for base in bases for name in base.__dict__.get("__slots__", ()))
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
        *(f"        self.{name} = None" for name in _HELD[cls]),
        "        self.__class__ = _cls",
        "    else:",
        *slow,
        *(["    self.__post_init__()"] if hasattr(cls, "__post_init__") else []),
    ])
    exec(source, scope)  # noqa: S102 - our own field names, nothing from outside
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init
    values = {f.name: line.split(" = ", 1)[1] for f, line in zip(fields(cls), fast, strict=True)}
    return slot_builder(cls, "make", ", ".join(params), values, scope)


def slot_builder(cls: type[Any], name: str, params: str, values: dict[str, str],
                 scope: dict[str, Any], checked: bool = True) -> Callable[..., Any]:
    """A function `name(params)` that returns a new `cls` (a slot_init class) whose fields
    are `values` (Python expressions of the parameters and of `scope`, by field name),
    set on its twin before it becomes a `cls`: one class change, not `__init__`'s two.
    `checked=False`: the class's `__post_init__` is not called."""
    lines = [f"def {name}({params}):", "    self = _new(_twin)"]
    lines += [f"    self.{f.name} = {values[f.name]}" for f in fields(cls)]
    lines += [f"    self.{name} = None" for name in _HELD[cls]]
    post_init = ["    self.__post_init__()"] if checked and hasattr(cls, "__post_init__") else []
    lines += ["    self.__class__ = _cls", *post_init, "    return self"]
    scope = {**scope, "_new": object.__new__, "_twin": _TWINS[cls], "_cls": cls}
    exec("\n".join(lines), scope)  # noqa: S102 - our own field names, nothing from outside
    made: Callable[..., Any] = scope[name]
    made.__qualname__ = f"{cls.__qualname__}.{name}"
    return made


def copier(cls: type[Any], *changed: str, checked: bool = True) -> Callable[..., Any]:
    """A function `(source, *changed values)` that returns a copy of `source` (a
    slot_init class) with the `changed` fields set: each other field read by name and set
    on the twin (a job with its opened arguments: 0.4 µs, against evolve's 1.6).
    `checked=False`: without the class's `__post_init__` (the changed fields need none)."""
    names = [f.name for f in fields(cls)]
    if unknown := set(changed) - set(names):
        raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
    values = {name: name if name in changed else f"_source.{name}" for name in names}
    return slot_builder(cls, f"with_{'_'.join(changed)}", ", ".join(("_source", *changed)), values, {},
                        checked)


slot_init(Job)
JOB_FIELDS = tuple(Job.__dataclass_fields__)


def held(jobs: list[Job], origin: Origin) -> list[Job]:
    """`jobs`, each now knowing the App they came from (`Job.wait`)."""
    for job in jobs:
        _set_origin(job, origin)
    return jobs


def carry(job: Job, checkpoints: dict[str, bytes]) -> None:
    """Give a just-claimed job its durable-step checkpoints as stored (name -> record):
    its run reads them from here, not from the store (steps/checkpoints.py)."""
    _set_checkpoints(job, checkpoints)


def carried(job: Job, take: bool = False) -> dict[str, bytes] | None:
    """The checkpoints `carry` gave this job; None: not known (its run reads them).
    `take`: and forget them (a run takes them: another run of the same job object, as
    tests make, reads the store)."""
    found: dict[str, bytes] | None = getattr(job, "_checkpoints", None)
    if take and found is not None:
        _set_checkpoints(job, None)
    return found


def uncarried(job: Job) -> bool:
    """A claimed job whose claim did not bring its checkpoints (steps.Steps reads them)."""
    return getattr(job, "_checkpoints", None) is None


RECORD = {f.name: f.metadata["deferq"] for f in fields(Job)}  # field -> Stored
COLUMNS = tuple(dict.fromkeys(spec.column for spec in RECORD.values()))  # in field order, each once
NEW_FIELDS = tuple(name for name, spec in RECORD.items() if spec.new)  # fresh_job's parameters
NEW_COLUMNS = tuple(dict.fromkeys(RECORD[name].column for name in NEW_FIELDS))  # what every insert writes
HTTP_FIELDS = {spec.http or name: name for name, spec in RECORD.items() if spec.http is not None}
_ALL_FIELDS = attrgetter(*JOB_FIELDS)
_FIELD_INDEX = {name: i for i, name in enumerate(JOB_FIELDS)}
_STAMPS = ("state", "run_at", "created_at", "expires_at", "updated_at")


def _builders() -> tuple[Callable[..., Job], Callable[[Job, JobState, float, float, float | None, float], Job]]:
    """`fresh_job` and `stamped`, written out from the declaration (slot_builder): every
    job enqueued is made by both, so each field not given is its default as a constant
    (or a name in scope), never looked up or passed."""
    scope: dict[str, Any] = {}
    defaults: dict[str, str] = {}
    for i, f in enumerate(fields(Job)):
        if f.default_factory is not MISSING:
            scope[f"_make{i}"] = f.default_factory
            defaults[f.name] = f"_make{i}()"
        elif f.default is None or type(f.default) in (bool, int, float):
            defaults[f.name] = repr(f.default)  # a constant, not a global to look up
        else:
            scope[f"_default{i}"] = f.default
            defaults[f.name] = f"_default{i}"
    fresh = slot_builder(Job, "fresh_job", ", ".join(NEW_FIELDS),
                         {**defaults, **{name: name for name in NEW_FIELDS}}, scope)
    values = {**defaults, **{name: f"job.{name}" for name in NEW_FIELDS}, **{name: name for name in _STAMPS}}
    stamp = slot_builder(Job, "stamped", f"job, {', '.join(_STAMPS)}", values, scope)
    return fresh, stamp


if TYPE_CHECKING:
    def fresh_job(
        id: str, task: str, args: tuple[Any, ...], kwargs: dict[str, Any], queue: str, priority: int,
        state: JobState, max_attempts: int, timeout: float | None, key: str | None, run_at: float,
        created_at: float, meta: dict[str, Any], expires_at: float | None, updated_at: float | None,
        remark: str | None, tags: tuple[str, ...], fair_key: str | None,
    ) -> Job:
        """A job never run: these fields (by position: every job a producer enqueues is
        built this way), every other at its default."""

    def stamped(job: Job, state: JobState, run_at: float, created_at: float, expires_at: float | None,
                updated_at: float) -> Job:
        """`job` as a store keeps it once stored (Enqueue.stored): what a new job sets,
        with these times and state, every other field at its default."""
else:
    fresh_job, stamped = _builders()


_SET_STATE, _SET_RUN_AT, _SET_CREATED_AT, _SET_UPDATED_AT = (
    Job.__dict__[name].__set__ for name in ("state", "run_at", "created_at", "updated_at"))
_SET_TIMES = (_SET_RUN_AT, _SET_CREATED_AT, _SET_UPDATED_AT)
_each = deque[Any](maxlen=0).extend  # runs an iterator to its end, keeping nothing


def stored_now(jobs: list[Job], now: float) -> list[Job]:
    """`jobs`, just stored at store time `now` and due then, as `stamped` would make them
    (queued, no expiry). A job `fresh_job` made for this store call and never stored
    before (created_at 0) is stamped in place, not copied: one `Job` a job enqueued, not
    two; any other is copied."""
    for job in jobs:
        if job.created_at or job.expires_at is not None or type(job) is not Job:
            return _stored_now_copying(jobs, now)
    # all fresh (a batch always is): each field set over the list in C, no loop in Python
    # (0.43 -> 0.28 ms a 1,000-job batch)
    _each(map(_SET_STATE, jobs, repeat(JobState.QUEUED)))
    for set_field in _SET_TIMES:
        _each(map(set_field, jobs, repeat(now)))
    return jobs


def _stored_now_copying(jobs: list[Job], now: float) -> list[Job]:
    out = list(jobs)
    for i, job in enumerate(jobs):
        if job.created_at or job.expires_at is not None or type(job) is not Job:
            out[i] = stamped(job, JobState.QUEUED, now, now, None, now)
            continue
        _SET_STATE(job, JobState.QUEUED)
        for set_field in _SET_TIMES:
            set_field(job, now)
    return out


def _check_fresh_job() -> None:
    """`fresh_job`, written by position for speed, must take the declared new fields in
    order and leave every other field at its default: checked once, at import."""
    params = tuple(inspect.signature(fresh_job).parameters)
    if params != NEW_FIELDS:
        raise TypeError(f"fresh_job takes {params}, the record's new fields are {NEW_FIELDS}")
    markers = [object() for _ in NEW_FIELDS]
    made = fresh_job(*markers)  # type: ignore[arg-type]
    for f in fields(Job):
        value = getattr(made, f.name)
        if f.name in NEW_FIELDS:
            wanted = markers[NEW_FIELDS.index(f.name)]
        else:
            wanted = f.default_factory() if f.default_factory is not MISSING else f.default
        if value is not wanted and value != wanted:
            raise TypeError(f"fresh_job sets {f.name} to {value!r}, not {wanted!r}")


_check_fresh_job()


def dumps(value: Any, what: str = "value") -> bytes:
    """Encode to JSON, naming the value that cannot be encoded."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError as exc:
        raise PayloadError(f"{what} is not JSON-serializable: {exc}") from None


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)


_dumps = orjson.dumps
_COPIED = 8192  # bytes: payloads up to this size are copied out of orjson's block (quicker up to ~16 KiB)


def encode_payload(
    task: str, args: tuple[Any, ...], kwargs: dict[str, Any], meta: dict[str, Any] | None = None
) -> bytes:
    """`[args, kwargs]` (or `[args, kwargs, meta]`) as JSON; refuses, by name, arguments
    that JSON cannot carry."""
    try:
        payload = _dumps((args, kwargs, meta) if meta else (args, kwargs))
    except TypeError:
        pass  # find and name the culprit
    else:
        if b"\\u0000" in payload:  # rare: then look for a NUL (not an escaped backslash before u0000)
            _refuse_nul(task, args, kwargs)
        # orjson's bytes start 1 KiB long and are shrunk in place: each one a batch keeps
        # until it is stored leaves a hole in the C allocator's heap that the next cannot
        # reuse (~2.5 µs a job of 50 bytes, 5 µs at 600). A copy made to size (the same
        # bytes, by slice: the quickest copy) costs ~0.1 µs, and the block is freed at once.
        return b"[" + payload[1:] if len(payload) <= _COPIED else payload
    for i, value in enumerate(args):
        _check_json(value, f"argument {i} of {task}()")
    for name, value in kwargs.items():
        _check_json(value, f"argument {name!r} of {task}()")
    raise PayloadError(f"the arguments of {task}() are not JSON-serializable")


def decode_payload(payload: bytes | str) -> tuple[tuple[Any, ...], dict[str, Any], dict[str, Any]]:
    """(args, kwargs, meta) of a stored payload; ValueError if it is not one."""
    decoded = orjson.loads(payload)
    if type(decoded) is list:  # unpacked by its length, not with a starred rest: once per job read
        args: Any = None
        if len(decoded) == 2:
            args, kwargs = decoded
            meta: Any = {}
        elif len(decoded) == 3:
            args, kwargs, meta = decoded
        if type(args) is list and type(kwargs) is dict and type(meta) is dict:
            return tuple(args), kwargs, meta
    raise ValueError("payload is not [args, kwargs] or [args, kwargs, meta]")


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


# -- marked ids ------------------------------------------------------------------------------
#
# A store that keeps jobs in several places (redis+shards: one place per server) keeps a
# job under its id marked with the number of its place, so that a look-up by id asks that
# place alone. The 11th and 12th characters (10 bits from the middle of the 80 that grow
# within a millisecond) are left out and two characters appended whose value (0-1023) is
# 4 x number + 1:
#
#     06H0G30DX5YKGH6BGCZVYCJVWC  ->  06H0G30DX5 GH6BGCZVYCJVWC 05  (number 1)
#
# The value's low bits 01 tell a marked id from any other (new_job_id's end in 00). Ids
# still sort by time (the first 10 characters hold the milliseconds) and within one
# process by creation; 70 random bits per millisecond keep them unique. Marking is
# string slicing: no cost to speak of.

MARKS = 256  # numbers 0-255
_MARKED = 0b01
_PAIR_VALUE = {pair: value for value, pair in enumerate(_PAIRS)}
_LOW_BITS = {c: i & 3 for i, c in enumerate(_CROCKFORD)}  # the 2 lowest bits of an id's last character


def mark_id(job_id: str, number: int) -> str:
    """`job_id` marked with `number` (0 to MARKS - 1); marked again, its mark is replaced.
    Anything else than a job id (26 characters, ending in 00 or marked) is returned
    unchanged."""
    if len(job_id) != 26:
        return job_id
    low = _LOW_BITS.get(job_id[25])
    if low == 0:
        return job_id[:10] + job_id[12:] + _PAIRS[number << 2 | _MARKED]
    if low == _MARKED:
        return job_id[:24] + _PAIRS[number << 2 | _MARKED]
    return job_id


def id_core(job_id: str) -> str:
    """The 24 characters of a job id that marking it (mark_id) leaves as they are, marked or
    not (anything else than 26 characters: as it is): what a value sealed for a job is
    bound to, so the job keeps its values when a sharded store marks it."""
    if len(job_id) != 26:
        return job_id
    return job_id[:24] if _PAIR_VALUE.get(job_id[24:], 0) & 3 == _MARKED else job_id[:10] + job_id[12:]


def mark_of(job_id: str) -> int | None:
    """The number a marked job id carries (mark_id), or None for an unmarked id."""
    value = _PAIR_VALUE.get(job_id[24:]) if len(job_id) == 26 else None
    if value is None or value & 3 != _MARKED:
        return None
    return value >> 2
