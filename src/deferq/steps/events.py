"""Events for jobs waiting in `job.wait_for` (`app.send_event`, POST /v1/events), and a
job's checkpoints as a timeline (its console page, `deferq job`, GET /v1/jobs/{id})."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ..backends.base import Backend
from ..context import duration
from ..encryption.jobs import Sealer, bound, checkpoint_fields, event_bound, sealed_result, shown_value, step_bound
from ..errors import PayloadError
from ..job import Job, JobState, dumps, loads, new_job_id
from . import children
from .checkpoints import (
    DONE,
    EVENT_LIMIT,
    EVENTS,
    FAILED,
    KEY_LIMIT,
    RESULT_LIMIT,
    STEPS,
    WAITERS,
    checked_name,
)
from .undo import UNDONE, timeline_fields

EVENT_KEEP = 7 * 86400.0  # seconds an event is kept for jobs that wait for it later
WAKE_BATCH = 1000  # waiters of an event woken per batch: bounds one store call's size


def send_event(store: Backend, event: str, key: str, data: Any = None,
               keep: float | timedelta = EVENT_KEEP, sealer: Sealer | None = None) -> int:
    """Deliver an event to every job waiting for (`event`, `key`) and keep it `keep`
    seconds for jobs that wait for it later. Returns how many waiting jobs it woke.
    `sealer` with a key: the data is kept encrypted, once, bound to the event and key."""
    keep = checked_event(event, key, keep)
    topic, now = f"{event}\t{key}", store.now()
    sent = {"id": new_job_id(), "data": data, "at": now}
    encoded = dumps(sent, "the event's data")
    if len(encoded) > RESULT_LIMIT:
        raise PayloadError(f"the event's data is {len(encoded)} bytes as JSON, over the {RESULT_LIMIT}-byte limit")
    if sealer is not None and sealer.keyring is not None and data is not None:
        data = sent["data"] = sealer.seal_value(data, event_bound(topic))
        encoded = dumps(sent, "the event's data")
    if keep > 0:
        store.kv_put(EVENTS, topic, encoded, ttl=keep)
    answer = dumps({"data": data, "event": sent["id"], "at": now})
    waiters = list(store.kv_list(WAITERS + topic))
    woken = 0
    for first in range(0, len(waiters), WAKE_BATCH):
        woken += deliver(store, topic, answer, waiters[first:first + WAKE_BATCH])
    if keep > 0 and woken:  # how many it woke, for the event list (unless a newer event replaced it)
        store.kv_swap(EVENTS, topic, encoded, dumps({**sent, "woke": woken}), ttl=keep)
    return woken


def checked_event(event: str, key: str, keep: float | timedelta = EVENT_KEEP) -> float:
    """The seconds to keep an event, once its name, key and `keep` are checked (ConfigError):
    the HTTP API checks them before its store call, where a ConfigError means a store that
    cannot be opened."""
    checked_name(event, "an event name", EVENT_LIMIT)
    checked_name(key, "an event key", KEY_LIMIT)
    return duration(keep, "keep")


def deliver(store: Backend, topic: str, answer: bytes, waiters: list[str]) -> int:
    """One batch of an event's waiters, in a few store round trips however many: each
    wait's answer written first, then its job woken, then its waiter record dropped (a
    sender that dies halfway leaves the rest to find the kept event at their timeout)."""
    waits = [waiter.partition("\t") for waiter in waiters]
    store.kv_put_many([(STEPS + job_id, name + DONE, answer) for job_id, _, name in waits], only_new=True)
    woken = store.wake_many([job_id for job_id, _, _ in waits])
    store.kv_delete_many(WAITERS + topic, waiters)
    return woken


def kept_events(store: Backend, sealer: Sealer | None = None) -> list[dict[str, Any]]:
    """The events kept for jobs that wait for them later, newest first: event, key, id,
    when it was sent, its data, the data's size (bytes of JSON) and how many waiting jobs
    it woke when it was sent (jobs that found it kept later are not counted)."""
    events = []
    for topic, raw in store.kv_list(EVENTS).items():
        event, _, key = topic.partition("\t")
        sent = loads(raw)
        data = shown_value(sent["data"], event_bound(topic), sealer)
        size = len(dumps(data)) if sealed_result(sent["data"]) is None or not isinstance(data, str) else len(data)
        events.append({"event": event, "key": key, "id": sent["id"], "at": sent["at"], "data": data,
                       "size": size, "woke": sent.get("woke", 0)})
    return sorted(events, key=lambda e: e["at"], reverse=True)


def waiting_for(job: Job, steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The wait a scheduled job is in (its last checkpoint, a wait with no answer yet):
    what makes it show as `waiting` rather than `scheduled`. None for any other job."""
    last = steps[-1] if steps else None
    if job.state != JobState.SCHEDULED or last is None or last["state"] != "waiting" or last["kind"] != "wait":
        return None
    return {"step": last["name"], "event": last["event"], "key": last["key"], "until": last["until"]}


def shown_state(job: Job, steps: list[dict[str, Any]]) -> str:
    """The job's state as people see it: `waiting` for a scheduled job in a wait."""
    return "waiting" if waiting_for(job, steps) is not None else str(job.state)


def shown_record(job_id: str, name: str, record: Any, sealer: Sealer | None) -> Any:
    """A checkpoint as a page shows it: each encrypted field opened, or "encrypted (N bytes)"."""
    if not isinstance(record, dict):
        return record
    child = children.CHILD in name  # a child's end: the child's values, bound to the child
    for field in ("result", "error") if child else checkpoint_fields(name):
        if field in record:
            where = bound(str(record.get("id")), field) if child else step_bound(job_id, name, field)
            record[field] = shown_value(record[field], where, sealer)
    return record


def timeline(store: Backend, job_id: str, sealer: Sealer | None = None) -> list[dict[str, Any]]:
    """A job's checkpoints in the order it reached them, for its page, `deferq job` and
    GET /v1/jobs/{id}: name, kind, when it started and what it gave (or awaits)."""
    records = {name: shown_record(job_id, name, loads(raw), sealer)
               for name, raw in store.kv_list(STEPS + job_id).items()}
    ends = {name: records.pop(name) for name in [n for n in records if children.is_child_record(n)]}
    for name in [n for n in records if n.endswith(FAILED)]:  # a step with retries of its own
        failed, step = records.pop(name), name.removesuffix(FAILED)
        if step in records:
            records[step]["failures"] = failed["failures"]
        else:  # it has not succeeded yet: it waits for its next try
            records[step] = {"kind": "step", "retrying": True, "at": failed["at"], "index": failed["index"],
                             "failures": failed["failures"], "error": failed["error"]}
    now = store.now()
    rows = []
    # (names with a tab are a checkpoint's companions: a wait's answer, a patch marker)
    for name, record in sorted(((n, r) for n, r in records.items() if "\t" not in n),
                               key=lambda item: item[1]["index"]):
        row = {"name": name, "kind": record["kind"], "at": record["at"], "attempt": record.get("attempt")}
        if record.get("retrying"):
            row.update(state="retrying", failures=record["failures"], error=record["error"])
        elif record["kind"] == "step":
            row.update(state="done", took=record.get("took"), result=record.get("result"), fn=record.get("fn"),
                       failures=record.get("failures"), **timeline_fields(record, records.get(name + UNDONE)))
        elif record["kind"] == children.KIND:
            row.update(children.row(name, record, ends))
        elif record["kind"] == "sleep":
            row.update(state="done" if record["until"] <= now else "sleeping", until=record["until"])
        else:
            answer = records.get(name + DONE)
            state = "waiting" if answer is None else "timed out" if answer.get("timeout") else "done"
            row.update(state=state, event=record["event"], key=record["key"], until=record["until"],
                       result=None if answer is None else shown_value(
                           answer.get("data"), event_bound(f"{record['event']}\t{record['key']}"), sealer))
        rows.append(row)
    return rows
