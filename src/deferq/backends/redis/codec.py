"""Jobs to script arguments, and job hashes back to `Job` values.

A job hash holds: task, payload (JSON [args, kwargs]), priority, state, attempts,
max_attempts, timeout, key, run_at, created_at, lease_until, worker, error, result,
finished_at, progress, progress_message, cancel_requested_at, expires_at, updated_at, remark,
last_worker; for workflows after_any and notify (docs/redis.md, "Workflows"), which this
reading leaves alone. Hashes can be edited by
hand; reading one never raises. A hash that cannot be read becomes a job whose kwargs
hold "_unreadable_payload" (the runner's convention, see worker/runner.py), so a
worker marks it dead with the reason.
"""

from __future__ import annotations

from typing import Any

from ...job import Job, JobState, decode_payload, dumps, loads
from ..base import Enqueue, state_for_waiting

ENQUEUE_STRIDE = 13  # ARGV values per job in enqueue.lua


def enqueue_args(item: Enqueue) -> tuple[Any, ...]:
    """The 13 ARGV values of one job for enqueue.lua."""
    job = item.job
    timeout = job.timeout
    expiry = job.expires_at if job.expires_at is not None else item.expires_in
    return (
        job.id, job.task, item.payload or dumps([job.args, job.kwargs], f"arguments of {job.task}()"),
        job.priority, job.max_attempts, "" if timeout is None else repr(timeout),
        job.key or "", repr(job.run_at), repr(item.delay),
        "" if expiry is None else ("@" if job.expires_at is not None else "+") + repr(expiry),
        item.on_conflict, "" if item.max_wait is None else repr(item.max_wait), job.remark or "",
    )  # fmt: skip


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


def _read_well_formed(job_id: str, queue: str, f: dict[bytes, bytes], now: float) -> Job:
    """The hot path (every leased job): strict, raises on anything unexpected."""
    get = f.get
    args, kwargs, meta = decode_payload(f[b"payload"])
    run_at = float(f[b"run_at"])
    state = f[b"state"]
    priority = int(f[b"priority"])
    if priority not in (0, 1, 2):
        raise ValueError("priority out of range")
    result = get(b"result")
    return Job(
        id=job_id, task=f[b"task"].decode(), args=args, kwargs=kwargs, queue=queue,
        priority=priority,
        state=state_for_waiting(run_at, now) if state == b"queued" else _STATES[state],
        attempts=int(get(b"attempts") or 0), max_attempts=int(f[b"max_attempts"]),
        timeout=_number(get(b"timeout")), key=_text(get(b"key")), run_at=run_at,
        created_at=float(f[b"created_at"]), lease_until=_number(get(b"lease_until")),
        worker=_text(get(b"worker")), error=_text(get(b"error")),
        result=loads(result) if result else None, finished_at=_number(get(b"finished_at")), meta=meta,
        progress=_number(get(b"progress")), progress_message=_text(get(b"progress_message")),
        cancel_requested=bool(get(b"cancel_requested_at")), expires_at=_number(get(b"expires_at")),
        updated_at=_number(get(b"updated_at")), remark=_text(get(b"remark")),
        last_worker=_text(get(b"last_worker")),
    )  # fmt: skip


def _read_carefully(job_id: str, queue: str, fields: dict[bytes, bytes], now: float) -> Job:
    reader = _Reader(fields)
    state_text = reader.text("state") or "queued"
    run_at = reader.number("run_at", 0.0)
    try:
        state = state_for_waiting(run_at, now) if state_text == "queued" else JobState(state_text)
    except ValueError:
        reader.problems.append(f"state {state_text!r}")
        state = JobState.DEAD
    args, kwargs, meta = reader.payload()
    result = reader.text("result")
    job = Job(
        id=job_id, task=reader.text("task") or "", args=args, kwargs=kwargs, queue=queue,
        priority=min(max(int(reader.number("priority", 1)), 0), 2), state=state,
        attempts=int(reader.number("attempts", 0)),
        max_attempts=int(reader.number("max_attempts", 1)),
        timeout=reader.number("timeout", None), key=reader.text("key"), run_at=run_at,
        created_at=reader.number("created_at", 0.0),
        lease_until=reader.number("lease_until", None), worker=reader.text("worker"),
        error=reader.text("error"), result=reader.json(result, "result"),
        finished_at=reader.number("finished_at", None), meta=meta,
        progress=reader.number("progress", None), progress_message=reader.text("progress_message"),
        cancel_requested=bool(reader.text("cancel_requested_at")),
        expires_at=reader.number("expires_at", None), updated_at=reader.number("updated_at", None),
        remark=reader.text("remark"), last_worker=reader.text("last_worker"),
    )  # fmt: skip
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
