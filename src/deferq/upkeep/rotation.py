"""`deferq encryption rotate`: every value stored under a key that is not the current one,
re-encrypted under the current key, while workers and producers go on.

Each value is swapped in one atomic store step that finds the old encrypted text first
(`Backend.reseal` for a job's fields, `kv_swap` for the records kept beside jobs): a
settle, a replace or a new attempt log written meanwhile wins, and the next run of
rotate finds what is left. A rotate stopped anywhere (killed, frozen) leaves every value
readable, under one key or the other: run it again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..attempt.pauses import pause_at
from ..backends.base import STEPS, Backend
from ..backends.search import JobQuery
from ..encryption.envelope import Keyring, Unreadable, key_of, sealed
from ..encryption.jobs import (
    ARGS,
    CHECKPOINT_FIELDS,
    CHILD_END,
    Sealer,
    bound,
    checkpoint_fields,
    event_bound,
    open_args,
    sealed_args,
    sealed_result,
    step_bound,
)
from ..job import ALL_STATES, Job, dumps, loads
from ..observe import attempts
from ..schedules.store import SCHEDULES, schedule_bound
from ..steps.checkpoints import DONE, EVENTS
from ..steps.events import EVENT_KEEP

PAGE = 200  # jobs read per store call


@dataclass
class Rotation:
    """What a rotate did: values moved to the current key, values it could not open (a key
    it lacks, a damaged value: named in `problems`), values that changed meanwhile."""

    current: str
    resealed: int = 0
    unreadable: int = 0
    changed: int = 0
    problems: list[str] = field(default_factory=list)

    def renewed(self, keyring: Keyring, old: str, where: bytes, what: str) -> str | None:
        """`old` encrypted anew under the current key; None (counted, with why) when it
        cannot be opened."""
        try:
            return keyring.seal(keyring.open(old, where, what), where)
        except Unreadable as exc:
            self.unreadable += 1
            self.problems.append(str(exc))
            return None

    def to_dict(self) -> dict[str, Any]:
        return {"current": self.current, "resealed": self.resealed, "unreadable": self.unreadable,
                "changed_meanwhile": self.changed, "problems": self.problems[:20]}


def rotate(store: Backend, sealer: Sealer, keep_finished_steps: float) -> Rotation:
    """Re-encrypt under the current key what `store` keeps under other keys: jobs'
    arguments, results, errors and progress messages, their attempt logs and durable
    steps, the kept events and the schedules' arguments. `keep_finished_steps`: how long a finished job's
    rewritten steps are kept (the App's result_ttl)."""
    keyring = sealer.writer()
    done = Rotation(str(keyring.current))
    for job in _every_job(store):
        for old, where in _job_values(keyring, job):
            _swap(done, keyring, old, where, f"job {job.id}",
                  lambda old, new, job_id=job.id: store.reseal(job_id, old, new))
        if job.error is not None or job.attempts > 1:
            _rewrite(done, keyring, store, attempts.NAMESPACE, job.id, attempts.KEEP_SECONDS,
                     lambda record, job_id=job.id: _attempt_values(record, job_id))
        ttl = keep_finished_steps if job.state.finished else None
        for name in store.kv_list(STEPS + job.id):
            _rewrite(done, keyring, store, STEPS + job.id, name, ttl,
                     lambda record, job=job, name=name: _step_values(store, job, name, record))
    for topic in store.kv_list(EVENTS):
        _rewrite(done, keyring, store, EVENTS, topic, EVENT_KEEP,
                 lambda record, topic=topic: [(record, "data", event_bound(topic))])
    for name in store.kv_list(SCHEDULES):
        _rewrite(done, keyring, store, SCHEDULES, name, None,
                 lambda record, name=name: [(record.get("schedule"), "kwargs", schedule_bound(name))]
                 if isinstance(record, dict) else [])
    return done


def _every_job(store: Backend) -> Iterator[Job]:
    for state in ALL_STATES:
        cursor: str | None = None
        while True:
            page = store.find_jobs(JobQuery(state=state, cursor=cursor, limit=PAGE))
            yield from page.jobs
            cursor = page.cursor
            if cursor is None or not page.jobs:
                break


def _job_values(keyring: Keyring, job: Job) -> list[tuple[str, bytes]]:
    """The encrypted texts a job record holds, each with what it is bound to (its arguments:
    to its id, or to its key when an enqueue with the key replaced them)."""
    found = []
    if (value := sealed_args(job)) is not None:
        try:
            where = open_args(keyring, job, value)[1]
        except Unreadable:
            where = bound(job.id, "args")  # counted with its reason when renewed
        found.append((value, where))
    if (value := sealed_result(job.result)) is not None:
        found.append((value, bound(job.id, "result")))
    for name, what in (("error", "error"), ("progress_message", "progress")):
        text = getattr(job, name)
        if sealed(text):
            found.append((text, bound(job.id, what)))
    return found


def _swap(done: Rotation, keyring: Keyring, old: str, where: bytes, what: str, swap: Any) -> None:
    if key_of(old) == keyring.current:
        return
    new = done.renewed(keyring, old, where, f"a value of {what}")
    if new is None:
        return
    pause_at("rotate.reseal")  # opened and sealed anew, not yet swapped in
    if swap(old, new):
        done.resealed += 1
    else:
        done.changed += 1


def _rewrite(done: Rotation, keyring: Keyring, store: Backend, namespace: str, key: str, ttl: float | None,
             values: Any) -> None:
    """A record kept beside jobs (JSON) with its encrypted values under the current key,
    swapped in only if it is still as read."""
    raw = store.kv_get(namespace, key)
    if raw is None:
        return
    try:
        record = loads(raw)
    except orjson.JSONDecodeError:
        return
    moved = 0
    for holder, name, where in values(record):
        value = holder.get(name) if isinstance(holder, dict) else None
        inner = value if sealed(value) else sealed_result(value)
        if inner is None or key_of(inner) == keyring.current:
            continue
        new = done.renewed(keyring, inner, where, f"record {key!r} of {namespace}")
        if new is None:
            continue
        holder[name] = new if value is inner else {ARGS: new}
        moved += 1
    if not moved:
        return
    pause_at("rotate.reseal")
    if store.kv_swap(namespace, key, raw, dumps(record), ttl):
        done.resealed += moved
    else:
        done.changed += moved


def _attempt_values(record: Any, job_id: str) -> list[tuple[Any, str, bytes]]:
    return [(entry, "error", bound(job_id, "error")) for entry in record if isinstance(entry, dict)] \
        if isinstance(record, list) else []


def _step_values(store: Backend, job: Job, name: str, record: Any) -> list[tuple[Any, str, bytes]]:
    """A checkpoint's encrypted values: its result and error (bound to the job and the
    checkpoint), a wait's answer (the event's data, bound to event and key), a child's end."""
    if not isinstance(record, dict):
        return []
    if name.endswith(DONE):
        wait = store.kv_get(STEPS + job.id, name.removesuffix(DONE))
        waited = loads(wait) if wait is not None else {}
        topic = f"{waited.get('event')}\t{waited.get('key')}"
        return [(record, "data", event_bound(topic))]
    if CHILD_END in name:  # a child's end: its values as the child keeps them, bound to the child
        return [(record, field, bound(str(record.get("id")), field)) for field in CHECKPOINT_FIELDS]
    return [(record, field, step_bound(job.id, name, field)) for field in checkpoint_fields(name)]
