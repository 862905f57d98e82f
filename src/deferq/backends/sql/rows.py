"""A job as a table row: the one decoder every SQL store (SQLite, PostgreSQL, MySQL)
reads its rows with, and the view of a job just written.

Each dialect's `queries.sql` lists the columns in its `job_columns` fragment in the
order of `job.COLUMNS` (the record's declaration; tests/contract/test_record.py holds them to
it); job reads add the store's clock after them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...job import (
    COLUMNS,
    JOB_FIELDS,
    NEW_COLUMNS,
    RECORD,
    Job,
    JobState,
    decode_payload,
    dumps,
    loads,
    slot_builder,
)
from ..base import LEVELS, Enqueue, state_for_waiting

WIDTH = len(COLUMNS)  # columns of `job_columns`; a job read puts the store's clock right after them

# How a field is read from its column, where it is not the column's value as it is
# (every other field of job.Job is). The payload is decoded once, into `_p`.
_READ = {
    "args": "_p[0]", "kwargs": "_p[1]", "meta": "_p[2]",
    "priority": "priority % LEVELS",  # a job held back is stored raised (base.BEHIND)
    "state": "state_for_waiting(run_at, now) if state == 'queued' else _STATES[state]",
    "cancel_requested": "cancel_requested_at is not None",
}
_READ.update({name: f"_json({spec.column}, {name}_empty)" for name, spec in RECORD.items() if spec.json})


class _States(dict[str, JobState]):
    """A stored state's JobState: a dict look-up (a fifth of JobState(state)); a name that
    is none raises as JobState does."""

    def __missing__(self, name: str) -> JobState:
        return JobState(name)


_STATES = _States({str(state): state for state in JobState})
# A Job from every field, in declaration order (no defaults to fill): 0.35 us a job
# quicker than Job(...), which changes its class twice (job.slot_init)
_made = slot_builder(Job, "job_made", ", ".join(JOB_FIELDS), {name: name for name in JOB_FIELDS}, {})


def _json(text: Any, empty: Any) -> Any:
    """A field kept as JSON text (`Stored.json`); NULL is its default."""
    if text is None:
        return empty
    value = loads(text)
    return tuple(value) if isinstance(empty, tuple) else value


def _payload(payload: Any) -> tuple[tuple[Any, ...], dict[str, Any], dict[str, Any]]:
    """An unreadable payload becomes the runner's `_unreadable_payload` marker: the worker
    marks that job dead with the reason."""
    try:
        return decode_payload(payload)
    except (ValueError, TypeError):
        return (), {"_unreadable_payload": str(payload)[:200]}, {}


def _reader() -> Callable[[Sequence[Any], float], Job]:
    """`job_from_row`, written out from the record's declaration (job.RECORD): one
    unpacking and one positional build of the Job (`_made`: every field in order), as
    fast as by hand."""
    source = "\n".join([
        "def job_from_row(row, now):",
        f"    ({', '.join(COLUMNS)},) = row",
        "    _p = _payload(payload)",
        f"    return _made({', '.join(_READ.get(name, spec.column) for name, spec in RECORD.items())})",
    ])
    scope: dict[str, Any] = {"_made": _made, "_STATES": _STATES, "LEVELS": LEVELS, "_json": _json,
                             "state_for_waiting": state_for_waiting, "_payload": _payload}
    scope.update({f"{name}_empty": Job.__dataclass_fields__[name].default for name, spec in RECORD.items()
                  if spec.json})
    exec(source, scope)  # noqa: S102 - our own field names, nothing from outside
    reader: Callable[[Sequence[Any], float], Job] = scope["job_from_row"]
    reader.__doc__ = "A row of `job_columns`, read at store time `now`."
    return reader


def job_of(row: Sequence[Any]) -> Job:
    """A job read: `job_columns`, then the store's clock (then anything else)."""
    return job_from_row(row[:WIDTH], row[WIDTH])


job_from_row = _reader()


def _dumps(value: Any) -> str | None:
    """A new job's JSON field as its column keeps it: NULL when empty (the default)."""
    return dumps(value, "a job field").decode() if value else None


def _writer(by_name: bool) -> Callable[[Job, Any], Any]:
    """What an insert writes of a job just stored (Enqueue.stored), written out from the
    declaration: the values of `job.NEW_COLUMNS` in order, or by column name. Waiting
    jobs are stored 'queued' (a read tells scheduled from queued by run_at)."""
    values = {"payload": "payload", "state": "'queued'"}
    values.update({spec.column: f"_dumps(job.{name})" for name, spec in RECORD.items() if spec.json and spec.new})
    items = [values.get(c, f"job.{c}") for c in NEW_COLUMNS]
    if by_name:
        body = "{" + ", ".join(f"{c!r}: {v}" for c, v in zip(NEW_COLUMNS, items, strict=True)) + "}"
    else:
        body = "(" + ", ".join(items) + ",)"
    scope: dict[str, Any] = {"_dumps": _dumps}
    exec(f"def write(job, payload):\n    return {body}", scope)  # noqa: S102 - our own field names
    writer: Callable[[Job, Any], Any] = scope["write"]
    return writer


# The values in column order (SQLite's positional insert) ...
new_row: Callable[[Job, Any], tuple[Any, ...]] = _writer(by_name=False)
# ... and by column name (PostgreSQL's and MySQL's named parameters, which add their own).
new_values: Callable[[Job, Any], dict[str, Any]] = _writer(by_name=True)


def stored_view(item: Enqueue, run_at: float, now: float) -> Job:
    """A job as just stored (due at `run_at`, created `now`), scheduled or queued."""
    return item.job.evolve(state=state_for_waiting(run_at, now), run_at=run_at, created_at=now,
                           expires_at=item.expiry(now))
