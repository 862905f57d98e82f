"""Batches with callbacks: `with app.batch(on_complete=..., on_success=...) as b:`.

Every job enqueued inside the block (or with `b.enqueue(call)`) joins the batch and
starts at once. When the block ends, the batch is closed: its record (the member ids)
is written, then its callbacks are stored as ordinary jobs that run after every member
(backends/deps.py): on_complete whatever their outcomes, on_success only if all
succeeded (else it ends cancelled, naming a member that failed). So each callback is
stored once and released once, by the store, in the transaction that settles the last
member; a member's settle touches its own edge rows, never a shared record.

A callback receives the batch's summary as the keyword argument `batch`
({"id", "total", "succeeded", "dead", "cancelled"}), counted by the worker as it takes
the callback (`summary`).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Any

from ..backends.base import Enqueue, JobAdmin, Records
from ..errors import ConfigError
from ..job import Job, JobState, dumps, loads, new_job_id
from ..middleware import Middleware
from ..task import AppLike, Call, build_enqueue, linked, with_meta

NAMESPACE = "deferq.batches"  # kv records: batch id -> {"members": [...], "callbacks": {...}}
BATCH_OF = "deferq.batch"  # meta of a callback: the id of its batch
MEMBER_OF = "deferq.member_of"  # meta of a member: the id of its batch (the job page shows it)
current: contextvars.ContextVar[Batch | None] = contextvars.ContextVar("deferq_batch", default=None)


@dataclass(frozen=True)
class BatchInfo:
    """What `app.get_batch(id)` answers."""

    id: str
    total: int
    pending: int
    succeeded: int
    dead: int
    cancelled: int
    state: str  # "running" or "complete"
    callbacks: dict[str, str]  # "on_complete" / "on_success" -> job id

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Batch:
    def __init__(
        self, app: AppLike[object], on_complete: Call | None = None, on_success: Call | None = None,
        join: BatchJoin | None = None,
    ) -> None:
        for name, call in (("on_complete", on_complete), ("on_success", on_success)):
            if call is not None and not isinstance(call, Call):
                raise ConfigError(f"{name} takes a task.call(...) value, got {call!r:.60}")
        self.app, self.on_complete, self.on_success = app, on_complete, on_success
        self.id = new_job_id()
        self.members: list[str] = []
        self.closed = False
        self._token: contextvars.Token[Batch | None] | None = None
        self.join = join  # the App's BatchJoin: busy while the block is open

    def enqueue(self, call: Call) -> Job:
        """Store one member (as any enqueue inside the `with` block does)."""
        return self.app.enqueue_many([call])[0]

    def tagged(self, items: list[Enqueue]) -> list[Enqueue]:
        """Members about to be stored, naming their batch."""
        if self.closed:
            raise ConfigError(f"batch {self.id} is closed: enqueue its members inside the with block")
        return [with_meta(item, **{MEMBER_OF: self.id}) for item in items]

    def joined(self, jobs: list[Job]) -> None:
        if self.closed:
            raise ConfigError(f"batch {self.id} is closed: enqueue its members inside the with block")
        self.members += [job.id for job in jobs]

    def __enter__(self) -> Batch:
        self._token = current.set(self)
        if self.join is not None:
            self.join.opened()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._token is not None:
            current.reset(self._token)
        try:
            if kind is None:  # an error in the block: the members run, no callbacks
                self.close()
        finally:
            if self.join is not None:
                self.join.closed()

    def close(self) -> None:
        """Write the batch's record, then its callbacks (after every member)."""
        if self.closed:
            return
        self.closed = True
        callbacks = {name: call for name, call in (("on_complete", self.on_complete),
                                                   ("on_success", self.on_success)) if call}
        items = {name: self._callback(call, name == "on_complete") for name, call in callbacks.items()}
        record = {"members": self.members, "callbacks": {name: item.job.id for name, item in items.items()}}
        self.app.backend.kv_put(NAMESPACE, self.id, dumps(record))
        if items:
            self.app.runtime.enqueue_items(list(items.values()))

    def _callback(self, call: Call, any_outcome: bool) -> Enqueue:
        item = build_enqueue(call, self.app.tasks.get(call.task), 0.0, fair_queues=self.app.fair_queues)
        if not self.members:  # nothing to wait for: complete (and successful) at once
            return with_meta(item, **{BATCH_OF: self.id})
        return linked(item, self.members, any_outcome, **{BATCH_OF: self.id})


class BatchJoin(Middleware):
    """Jobs enqueued inside a `with app.batch()` block join it (installed by the App):
    tagged as members before the store call, their ids added once stored. Idle while no
    block of its App is open (in any thread): the chain then skips it, so an enqueue
    outside every batch never enters this module. `changed`: the chain's, to look again."""

    def __init__(self, changed: Callable[[], None] = lambda: None) -> None:
        self.changed = changed
        self.open = 0  # blocks open now
        self.lock = threading.Lock()

    @property
    def idle(self) -> bool:  # type: ignore[override]
        return not self.open

    def opened(self) -> None:
        with self.lock:
            self.open += 1
            if self.open == 1:
                self.changed()

    def closed(self) -> None:
        with self.lock:
            self.open -= 1
            if not self.open:
                self.changed()

    def before_enqueue(self, items: list[Enqueue]) -> list[Enqueue]:
        joining = current.get()
        return items if joining is None else joining.tagged(items)

    def after_store(self, items: list[Enqueue], jobs: list[Job]) -> None:
        if (joining := current.get()) is not None:
            joining.joined(jobs)


def record_of(store: Records, batch_id: str) -> dict[str, Any] | None:
    raw = store.kv_get(NAMESPACE, batch_id)
    return loads(raw) if raw is not None else None


def info(store: Any, batch_id: str) -> BatchInfo | None:
    """The batch's counts, from its members' states (None: no such closed batch)."""
    record = record_of(store, batch_id)
    if record is None:
        return None
    members: list[str] = record["members"]
    counts = count_states(store, members)
    finished = counts["succeeded"] + counts["dead"] + counts["cancelled"]
    return BatchInfo(batch_id, len(members), len(members) - finished, counts["succeeded"], counts["dead"],
                     counts["cancelled"], "complete" if finished == len(members) else "running",
                     record.get("callbacks", {}))


def count_states(store: JobAdmin, ids: list[str]) -> dict[str, int]:
    """Members by state; a member purged counts as it ended (unknown: cancelled)."""
    counts = dict.fromkeys(("succeeded", "dead", "cancelled"), 0)
    counter = getattr(store, "count_states", None)
    if counter is not None:
        found = counter(ids)
    else:
        found = {}
        for job_id in ids:
            job = store.get(job_id)
            state = str(job.state) if job else str(JobState.CANCELLED)
            found[state] = found.get(state, 0) + 1
    counts.update(found)
    counts["cancelled"] += len(ids) - sum(found.values())  # purged, or never stored
    return counts


def summary(store: Any, batch_id: str) -> dict[str, Any]:
    """The `batch` keyword argument of a callback."""
    found = info(store, batch_id)
    if found is None:
        return {"id": batch_id, "total": 0, "succeeded": 0, "dead": 0, "cancelled": 0}
    return {"id": found.id, "total": found.total, "succeeded": found.succeeded, "dead": found.dead,
            "cancelled": found.cancelled}
