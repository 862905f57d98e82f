"""Jobs to script arguments, and job hashes back to `Job` values.

A job hash holds: task, payload (JSON [args, kwargs]), priority, state, attempts,
max_attempts, timeout, key, run_at, ct (or created_at), lease_until, worker, error, result,
finished_at, progress, progress_message, cancel_requested_at, expires_at, updated_at, remark,
last_worker, tags (a JSON array; left out when none), fair_key, waits_for (a durable wait's
"<event>\\t<key>" while the job waits in it: settle.lua), chunk_call (the chunk call that
last ran it: settle.lua); for workflows after_any and notify
(docs/redis.md, "Workflows"), which this reading leaves alone.

A new job's hash holds its creation time as ct (integer microseconds: the store keeps
the integer in 9 bytes, the 17-digit text in 19, and the short name saves 8 more) and leaves out what its readers
can tell without it (docs/redis.md, "The job hash"): priority when normal, max_attempts
and timeout when they are the task defaults' (PRIORITY, MAX_ATTEMPTS, TIMEOUT; a timeout of none is stored
as ""), run_at when the job was due at once (it is the creation time), and updated_at
(the creation time until the job first changes). Hashes written before that hold
created_at as text and every field, and read the same. Hashes can be edited by
hand; reading one never raises. A hash that cannot be read becomes a job whose kwargs
hold "_unreadable_payload" (the runner's convention, see attempt/runner.py), so a
worker marks it dead with the reason.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ...job import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_TIMEOUT,
    RECORD,
    Job,
    JobState,
    Priority,
    Stored,
    carry,
    decode_payload,
    dumps,
    loads,
    slot_builder,
)
from ..base import Enqueue, state_for_waiting

ENQUEUE_STRIDE = 17  # ARGV values per job in enqueue.lua
# Values a new hash leaves out, read back when the field is absent: the task defaults,
# so that most jobs store none of them (the hashes are most of a store's memory).
PRIORITY, MAX_ATTEMPTS, TIMEOUT = Priority.NORMAL, DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT


def _or_left_out(value: object, default: object) -> str:
    """An enqueue.lua ARGV value: "" when the hash leaves the field out."""
    return "" if value == default else str(value)


def _payload(item: Enqueue) -> bytes:
    job = item.job
    return item.payload or dumps([job.args, job.kwargs], f"arguments of {job.task}()")


def _settings(priority: int, max_attempts: int, timeout: float | None) -> tuple[str, str, str]:
    """priority, max_attempts, timeout as the scripts take them ('' = the default)."""
    return (
        _or_left_out(int(priority), PRIORITY), _or_left_out(max_attempts, MAX_ATTEMPTS),
        "none" if timeout is None else _or_left_out(float(timeout), TIMEOUT),
    )


_NO_FAIR = ("", "")  # fair key and weight of a job without a key


def enqueue_args(item: Enqueue) -> tuple[Any, ...]:
    """The 17 ARGV values of one job for enqueue.lua."""
    job = item.job
    expiry = job.expires_at if job.expires_at is not None else item.expires_in
    return (
        job.id, job.task, _payload(item), *_settings(job.priority, job.max_attempts, job.timeout),
        job.key or "", repr(job.run_at), repr(item.delay),
        "" if expiry is None else ("@" if job.expires_at is not None else "+") + repr(expiry),
        item.on_conflict, "" if item.max_wait is None else repr(item.max_wait), job.remark or "",
        dumps(job.tags, "tags") if job.tags else "",
        *((job.fair_key, repr(item.fair_weight)) if job.fair_key else _NO_FAIR),
        "" if item.unique_for is None else repr(item.unique_for),
    )


@functools.lru_cache(maxsize=1024)
def _add_kind(
    task: str, priority: int, max_attempts: int, timeout: float | None
) -> tuple[tuple[str, ...], bytes | None]:
    """What add.lua's jobs of one task and settings share, made once: the ARGV before the
    jobs when due at once (the due time's two values follow the three settings), and a
    record's part between its creation time and its payload; None for a task name with
    a line break, which the record cannot hold."""
    settings = _settings(priority, max_attempts, timeout)
    head = None
    if "\n" not in task:
        rest = ",".join(("", *settings)) if any(settings) else ""
        head = f"\n{task}\n{rest}\n".encode()
    return (*settings, repr(0.0), repr(0.0)), head


def add_args(items: Sequence[Enqueue]) -> list[Any] | None:
    """The ARGV of add.lua for `items`, or None when they need enqueue.lua: when one has a
    unique key, parents, an expiry, a remark, tags or a fair key (or a task name with a line break, which
    the record cannot hold), or they differ in queue, priority, max_attempts, timeout or
    due time."""
    first = items[0]
    job = first.job
    queue, priority, max_attempts, timeout, run_at, delay = (
        job.queue, job.priority, job.max_attempts, job.timeout, job.run_at, first.delay)
    due_now = not run_at and not delay
    shared, head = _add_kind(job.task, priority, max_attempts, timeout)
    args: list[Any] = list(shared) if due_now else [*shared[:3], repr(run_at), repr(delay)]
    heads: dict[str, bytes | None] = {job.task: head}  # task -> the record's part before the payload
    for item in items:
        job = item.job
        if (
            job.key is not None or item.after or job.expires_at is not None or item.expires_in is not None
            or job.remark is not None or job.tags or job.fair_key is not None or job.queue != queue
            or job.priority != priority or job.max_attempts != max_attempts or job.timeout != timeout
            or job.run_at != run_at or item.delay != delay
        ):
            return None
        head = heads.get(job.task, b"")
        if head == b"":  # another task
            head = heads[job.task] = _add_kind(job.task, priority, max_attempts, timeout)[1]
        if head is None:
            return None
        if due_now:
            args += (job.id, head + _payload(item))
        else:
            args += (job.id, job.task, _payload(item))
    return args


AddKind = tuple[str, int, int, "float | None"]  # queue, priority, max_attempts, timeout


def add_one(item: Enqueue) -> tuple[AddKind, bytes] | None:
    """task.enqueue()'s commonest job (plain, due at once) as add.lua takes it: its kind
    (queue and settings), which fixes the call but for the job (`add_kind_args`), and its
    record after the creation time; None when add_args must look at it (or enqueue.lua
    store it)."""
    job = item.job
    if (
        job.key is not None or item.after or job.expires_at is not None or item.expires_in is not None
        or job.remark is not None or job.tags or job.fair_key is not None or job.run_at or item.delay
    ):
        return None
    head = _add_kind(job.task, job.priority, job.max_attempts, job.timeout)[1]
    if head is None:
        return None
    return (job.queue, job.priority, job.max_attempts, job.timeout), head + _payload(item)


def add_kind_args(kind: AddKind) -> tuple[str, ...]:
    """add.lua's ARGV before the jobs, for the jobs of `kind` due at once."""
    return (*_settings(kind[1], kind[2], kind[3]), repr(0.0), repr(0.0))


ADD_GROUPS = 8  # at most this many add.lua calls for one batch of plain jobs of several queues


def add_groups(items: Sequence[Enqueue]) -> list[tuple[list[int], list[Any]]] | None:
    """add.lua calls for plain `items` of a few queues, each queue's jobs of one kind
    (priority, settings, due time): (positions, ARGV) of each queue's; None when one
    needs enqueue.lua, when a queue's jobs differ (one script a queue keeps each queue's
    jobs all or nothing), or when they are of more than ADD_GROUPS queues."""
    groups: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(item.job.queue, []).append(i)
        if len(groups) > ADD_GROUPS:
            return None
    calls = []
    for positions in groups.values():
        args = add_args([items[i] for i in positions])
        if args is None:
            return None
        calls.append((positions, args))
    return calls


_SETTINGS = (b"run_at", b"priority", b"max_attempts", b"timeout")


def record_fields(record: bytes) -> dict[bytes, bytes]:
    """The fields of a job add.lua stored as a record in its queue's `new` hash (the
    layout: _lib.lua, record_fields), as its hash would hold them."""
    parts = record.split(b"\n", 3)
    if len(parts) < 4:  # edited by hand: job_from_hash names what it cannot read
        return {b"payload": record, b"state": b"queued"}
    ct, task, settings, payload = parts
    fields = {b"task": task, b"payload": payload, b"state": b"queued", b"ct": ct}
    if settings:
        for name, value in zip(_SETTINGS, settings.split(b","), strict=False):
            if value:
                fields[name] = b"" if value == b"none" else value
    return fields


def pairs(flat: list[Any]) -> dict[bytes, bytes]:
    """HGETALL as a script returns it (a flat list) -> dict."""
    it = iter(flat)
    return dict(zip(it, it, strict=True))


def job_from_hash(job_id: str, queue: str, fields: dict[bytes, bytes], now: float) -> Job:
    """The job a hash describes. Never raises: what cannot be read is named instead."""
    try:
        return _read_well_formed(job_id, queue, fields, now)
    except (ValueError, TypeError, KeyError, AttributeError):
        return _read_carefully(job_id, queue, fields, now)


_STATES = {state.value.encode(): state for state in JobState}  # no Enum call per job


def _number(value: bytes | None) -> float | None:
    return float(value) if value else None


def _text(value: bytes | None) -> str | None:
    return value.decode() if value else None


def _tags(value: bytes | None) -> tuple[str, ...]:
    return tuple(loads(value)) if value else ()


def _created_at(f: dict[bytes, bytes]) -> float:
    """created_at in seconds: a new hash holds ct (integer microseconds, which the store
    keeps in half the bytes of the text); one written before holds created_at."""
    text = f.get(b"created_at")
    return float(text) if text is not None else int(f[b"ct"]) / 1_000_000


# Fields most hashes lack (a job's first attempt, still to finish): one set test for all
_RARE = frozenset((b"error", b"result", b"finished_at", b"progress", b"progress_message", b"cancel_requested_at"))


# How the hot reader gives each field of job.Job (job.RECORD), where it is not read by its
# kind from its hash field (_BY_KIND): the locals its first lines compute (_WELL_FORMED).
_HASH_READ = {
    "id": "job_id", "task": 'f[b"task"].decode()', "args": "args", "kwargs": "kwargs", "queue": "queue",
    "priority": "priority", "state": "job_state", "attempts": "attempts",
    "max_attempts": 'int(get(b"max_attempts") or MAX_ATTEMPTS)',
    "timeout": "TIMEOUT if timeout is None else _number(timeout)", "run_at": "run_at",
    "created_at": "created_at", "lease_until": "lease_until", "worker": "worker", "error": "error",
    "result": "result", "finished_at": "finished_at", "meta": "meta", "progress": "progress",
    "progress_message": "progress_message", "cancel_requested": "cancel_requested",
    "updated_at": "updated_at", "last_worker": "last_worker",
}
# Every other field by its type (a JSON field by its default): a new plain field is read
# with no edit here; a kind not listed stops the import, naming the field.
_BY_KIND = {"str | None": "_text", "float | None": "_number", "tuple[str, ...]": "_tags"}

_WELL_FORMED = """
def _read_well_formed(job_id, queue, f, now, lease=None):
    get = f.get
    args, kwargs, meta = decode_payload(f[b"payload"])
    created_at = _created_at(f)
    run_at = float(get(b"run_at") or created_at)
    priority = int(get(b"priority") or PRIORITY)
    if priority not in (0, 1, 2):
        raise ValueError("priority out of range")
    timeout = get(b"timeout")
    error = result = finished_at = progress = progress_message = None
    cancel_requested = False
    if not f.keys().isdisjoint(_RARE):
        error, finished_at = _text(get(b"error")), _number(get(b"finished_at"))
        result, progress = get(b"result"), _number(get(b"progress"))
        result = loads(result) if result else None
        progress_message, cancel_requested = _text(get(b"progress_message")), bool(get(b"cancel_requested_at"))
    if lease is None:
        state = f[b"state"]
        worker, lease_until = _text(get(b"worker")), _number(get(b"lease_until"))
        attempts, last_worker = int(get(b"attempts") or 0), _text(get(b"last_worker"))
        updated_at = _number(get(b"updated_at")) or created_at
        job_state = state_for_waiting(run_at, now) if state == b"queued" else _STATES[state]
    else:
        worker, lease_until, attempts = lease
        worker = last_worker = worker or None
        updated_at, job_state = now or created_at, JobState.ACTIVE
    return _job({fields})
"""


def _field_read(name: str, spec: Stored) -> str:
    if name in _HASH_READ:
        return _HASH_READ[name]
    kind = _BY_KIND.get(str(Job.__dataclass_fields__[name].type))
    if kind is None:
        raise TypeError(f"job field {name} is of a kind the Redis hash reader does not know: add it to _HASH_READ")
    return f'{kind}(get(b"{spec.column}"))'


# A Job from every field in the record's order, set on its slots (job.slot_builder):
# quicker than Job(...), whose frozen __init__ sets each field through object.__setattr__.
_job: Callable[..., Job] = slot_builder(Job, "_job", ", ".join(RECORD), {name: name for name in RECORD}, {})


def _well_formed_reader() -> Callable[..., Job]:
    """The hot path (every job read or leased), written out from the record's declaration
    (job.RECORD) as sql/rows.py's reader is: strict, raises on anything unexpected. With
    `lease` (worker, lease deadline, attempts), `f` is the hash as it was before a lease
    reserve.lua just wrote, and the job is as the lease left it."""
    source = _WELL_FORMED.format(fields=", ".join(_field_read(name, spec) for name, spec in RECORD.items()))
    scope: dict[str, Any] = {
        "_job": _job, "JobState": JobState, "decode_payload": decode_payload, "loads": loads, "_text": _text,
        "_number": _number, "_tags": _tags, "_created_at": _created_at, "_RARE": _RARE, "_STATES": _STATES,
        "state_for_waiting": state_for_waiting, "PRIORITY": PRIORITY, "MAX_ATTEMPTS": MAX_ATTEMPTS,
        "TIMEOUT": TIMEOUT,
    }
    exec(source, scope)  # noqa: S102 - our own field names, nothing from outside
    reader: Callable[..., Job] = scope["_read_well_formed"]
    reader.__doc__ = _well_formed_reader.__doc__
    return reader


_read_well_formed = _well_formed_reader()


# A new job (its hash holds ct, task, payload and state) as a lease leaves it: these
# fields, every other at its default (written out from job.RECORD, without Job.__init__).
_LEASED_NEW = {
    "id": "job_id", "task": "task", "args": "args", "kwargs": "kwargs", "queue": "queue", "priority": "PRIORITY",
    "state": "ACTIVE", "attempts": "attempts", "max_attempts": "MAX_ATTEMPTS", "timeout": "TIMEOUT",
    "run_at": "created_at", "created_at": "created_at", "lease_until": "lease_until", "worker": "worker",
    "meta": "meta", "updated_at": "now or created_at", "last_worker": "worker",
}


def _default(name: str) -> str:
    """A field's default as a constant (None, False, 0, ())."""
    default = Job.__dataclass_fields__[name].default
    if default is None or default == () or type(default) in (bool, int, float):
        return repr(default)
    raise TypeError(f"job field {name} has no constant default: give it in _LEASED_NEW")


_leased_new: Callable[..., Job] = slot_builder(
    Job, "_leased_new", "job_id, task, args, kwargs, queue, attempts, created_at, lease_until, worker, meta, now",
    {name: _LEASED_NEW.get(name) or _default(name) for name in RECORD},
    {"PRIORITY": PRIORITY, "ACTIVE": JobState.ACTIVE, "MAX_ATTEMPTS": MAX_ATTEMPTS, "TIMEOUT": TIMEOUT},
)


def leased_record(job_id: str, queue: str, record: bytes, attempts: int, lease_until: float, worker: str | None,
                  now: float) -> Job | None:
    """The job reserve.lua just leased from a record add.lua stored with the task defaults
    and due at once (most claims): straight to the job, no dict of its fields. None for
    any other record: `leased_job` reads it."""
    parts = record.split(b"\n", 3)
    if len(parts) != 4 or parts[2]:
        return None
    ct, task, _, payload = parts
    try:
        args, kwargs, meta = decode_payload(payload)
        job = _leased_new(job_id, task.decode(), args, kwargs, queue, attempts, int(ct) / 1_000_000, lease_until,
                          worker, meta, now)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None  # leased_job's careful way names what it cannot read
    carry(job, {})  # never leased before: no checkpoints
    return job


def leased_job(job_id: str, queue: str, flat: list[Any] | bytes, now: float, worker: str, lease_until: bytes,
               attempts: int, now_text: bytes) -> Job:
    """The job reserve.lua just leased: its hash as it was before the lease (`flat`, a
    flat HGETALL, or the record add.lua stored), and what the lease wrote (state, worker,
    lease, attempts, updated_at): the job `job_from_hash` reads from the hash after.
    A job never leased before (no last_worker) carries no durable-step checkpoints."""
    if isinstance(flat, bytes):  # a record add.lua stored
        f = record_fields(flat)
    else:
        it = iter(flat)
        f = dict(zip(it, it, strict=False))  # an HGETALL: always pairs
    fresh = not f.get(b"last_worker")
    try:
        if len(f) == 4 and b"ct" in f and b"state" in f:  # a new job: every other field at its default
            args, kwargs, meta = decode_payload(f[b"payload"])
            created_at = int(f[b"ct"]) / 1_000_000
            job = _leased_new(job_id, f[b"task"].decode(), args, kwargs, queue, int(attempts), created_at,
                              float(lease_until), worker or None, meta, now)
        else:
            job = _read_well_formed(job_id, queue, f, now, (worker, float(lease_until), int(attempts)))
    except (ValueError, TypeError, KeyError, AttributeError):
        name = worker.encode()
        f.update({b"state": b"active", b"worker": name, b"lease_until": lease_until, b"last_worker": name,
                  b"updated_at": now_text, b"attempts": b"%d" % attempts})
        job = _read_carefully(job_id, queue, f, now)
    if fresh:
        carry(job, {})
    return job


# What the careful reader gives otherwise than by the field's kind (_Reader.of_kind)
_CAREFUL = frozenset(("id", "task", "args", "kwargs", "queue", "priority", "state", "attempts", "max_attempts",
                      "timeout", "run_at", "created_at", "result", "meta", "cancel_requested", "updated_at"))


def _read_carefully(job_id: str, queue: str, fields: dict[bytes, bytes], now: float) -> Job:
    reader = _Reader(fields)
    state_text = reader.text("state") or "queued"
    created_at = reader.number("created_at", reader.number("ct", 0) / 1_000_000)
    run_at = reader.number("run_at", created_at)
    try:
        state = state_for_waiting(run_at, now) if state_text == "queued" else JobState(state_text)
    except ValueError:
        reader.problems.append(f"state {state_text!r}")
        state = JobState.DEAD
    args, kwargs, meta = reader.payload()
    job = Job(
        id=job_id, task=reader.text("task") or "", args=args, kwargs=kwargs, queue=queue,
        priority=min(max(int(reader.number("priority", PRIORITY)), 0), 2), state=state,
        attempts=int(reader.number("attempts", 0)),
        max_attempts=int(reader.number("max_attempts", MAX_ATTEMPTS)),
        timeout=reader.number("timeout", None if b"timeout" in fields else TIMEOUT),
        run_at=run_at, created_at=created_at, result=reader.json(reader.text("result"), "result"), meta=meta,
        cancel_requested=bool(reader.text("cancel_requested_at")),
        updated_at=reader.number("updated_at", created_at),
        **{name: reader.of_kind(name, spec.column) for name, spec in RECORD.items() if name not in _CAREFUL},
    )
    if reader.problems and "_unreadable_payload" not in job.kwargs:
        unreadable = "unreadable job hash: " + ", ".join(reader.problems)
        job = job.with_state(job.state, kwargs={**job.kwargs, "_unreadable_payload": unreadable})
    return job


class _Reader:
    """Reads fields of a job hash, noting what could not be read instead of raising."""

    def __init__(self, fields: dict[bytes, bytes]) -> None:
        self.fields = fields
        self.problems: list[str] = []

    def text(self, name: str) -> str | None:
        value = self.fields.get(name.encode())
        if value is None or value == b"":
            return None
        return value.decode("utf-8", "replace")

    def number(self, name: str, default: Any) -> Any:
        value = self.fields.get(name.encode())
        if value is None or value == b"":
            return default
        try:
            return float(value)
        except ValueError:
            self.problems.append(f"{name} {value[:40]!r}")
            return default

    def of_kind(self, name: str, column: str) -> Any:
        """A field by its type (as the hot reader's _BY_KIND): text, a number, or a JSON array."""
        kind = _BY_KIND[str(Job.__dataclass_fields__[name].type)]
        if kind == "_text":
            return self.text(column)
        if kind == "_number":
            return self.number(column, None)
        return tuple(self.json(self.text(column), column) or ())

    def json(self, text: str | None, name: str) -> Any:
        if text is None:
            return None
        try:
            return loads(text)
        except ValueError:
            self.problems.append(f"{name} is not JSON")
            return text

    def payload(self) -> tuple[tuple[Any, ...], dict[str, Any], dict[str, Any]]:
        raw = self.fields.get(b"payload")
        try:
            return decode_payload(raw or b"")
        except ValueError:
            shown = (raw or b"(missing)")[:200].decode("utf-8", "replace")
            return (), {"_unreadable_payload": f"payload {shown!r} is not JSON [args, kwargs]"}, {}
