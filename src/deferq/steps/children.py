"""Child jobs a durable job waits for: `job.gather(name, calls)` and `job.run_child(name, call)`
(docs/steps.md, "Child jobs").

A gather is a checkpoint of kind "children" in the parent's records (`deferq.steps:<parent id>`):
- `<name>`: the children's ids, chosen before any is stored and kept like a step's result
  (fenced by the parent's lease, the first writer wins), so every run names the same children;
- `<name>\\tstored`: written once they are all stored. A run that finds the ids without it
  (its worker died while storing them) looks up which exist and stores the others alone:
  each child is stored once;
- `<name>\\tchild\\t<child id>`: that child's end (state, result or error), written by the
  settle that ended it (`ChildEnds`), the first write kept;
- `<name>\\tended`: how many ends are written, moved on by compare-and-set (`kv_swap`) by the
  writer of each batch of ends, and which gather they count (its first child's id as
  planned). The one that moves it to the total wakes the parent: N children cost the
  parent one wake-up. A child of an earlier gather of the same name (dropped by
  `retry_from` while it still ran) writes and counts nothing.
Each child carries its place in its meta (PARENT: parent id, gather name, index, how many,
and that gather's token). The parent leaves the worker while its
children run (a `Suspend`: it holds no slot), due again at the latest `recheck` later (as
long as the gather has lasted so far, from RECHECK[0] to RECHECK[1] seconds). If no end
was counted since its last recheck (`<name>\\tseen`), it looks for itself at children
whose end was not written (a worker killed between a child's settle and its hook, a child
cancelled or ended dead by the store's recovery).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from ..attempt.pauses import pause_at
from ..backends.base import PARENT, STEPS, Backend, Enqueue, Outcome, OutcomeKind, with_children
from ..encryption.envelope import Unreadable, sealed
from ..encryption.jobs import Sealer, bound, sealed_result, shown_value
from ..errors import ChildFailed, ConfigError, DeferqError, PayloadError, StepMismatch
from ..job import Job, JobState, dumps, loads, mark_id, new_job_ids
from ..middleware import Middleware, Settled
from ..task import Call, Runtime, build_enqueue, with_meta
from .checkpoints import JobSteps, Suspend

log = logging.getLogger("deferq.worker")

KIND = "children"
STORED, ENDED, CHILD = "\tstored", "\tended", "\tchild\t"  # + after a gather's name (above)
SEEN = "\tseen"  # + a gather's name: the count its parent saw at its last recheck
MOST_CHILDREN = 100_000  # of one gather: bounds the checkpoint that lists their ids
RECHECK = (10.0, 300.0)  # seconds: the shortest and longest wait before a parent looks for itself
MOST_DEPTH = 8  # generations a cancel goes down (children of children ...)
FAILED_STATES = (str(JobState.DEAD), str(JobState.CANCELLED))


class ChildrenSuspend(Suspend):
    """The parent leaves the worker until its last child ends (or its recheck). `gather`: the
    checkpoint's name, `total`: how many children (ChildEnds wakes it if they all ended
    while it settled)."""

    def __init__(self, delay: float, reason: str, gather: str, total: int) -> None:
        super().__init__(delay, reason)
        self.gather, self.total = gather, total


def is_child_record(name: str) -> bool:
    """A record of a gather's children (not a checkpoint of its own)."""
    return name.endswith((STORED, ENDED, SEEN)) or CHILD in name


class DurableJob(JobSteps):
    """A running job's checkpoints (JobSteps) and its child jobs, stored through `runtime`
    (the App's: its tasks' defaults and its middleware)."""

    def __init__(self, store: Backend, lease: float, keep: float, job: Job, runtime: Runtime[Any] | None) -> None:
        super().__init__(store, lease, keep, job, runtime.chain.sealer if runtime is not None else None)
        self.runtime = runtime

    def gather(self, name: str, calls: list[Any]) -> list[Any]:
        checked_calls(calls)
        if self.runtime is None:
            raise ConfigError("child jobs need the job to run under an App's worker (or deferq.testing)")
        record = self.reach(name, KIND)
        items = None  # the children as this run planned them, when it kept their ids
        if record is None:
            ids = new_job_ids(len(calls)) if calls else []
            items = self.planned(name, ids, calls)  # a call refused here stores nothing
            pause_at("children.before")
            record = self.put(name, self.started(name, KIND, ids=ids))
            if record["ids"] != ids:  # another attempt kept its own first
                items = None
        ids = record["ids"]
        if len(ids) != len(calls):
            raise StepMismatch(f"{name!r} of job {self.job.id} started {len(ids)} child jobs and is given "
                               f"{len(calls)} now: rename it to change its children")
        if not ids:
            return []
        stored = self.load().get(name + STORED)
        if stored is None:
            planned = items if items is not None else self.planned(name, ids, calls)
            stored = self.spawn(name, ids, planned, items is None)
        return self.collect(name, stored.get("ids") or ids, ids[0], record["at"], fresh=items is not None)

    def planned(self, name: str, ids: list[str], calls: list[Call[Any]]) -> list[Enqueue]:
        """The children in stored form, each with its id and its place (PARENT)."""
        runtime = self.runtime
        assert runtime is not None
        total, items = len(ids), []
        for index, (call, child_id) in enumerate(zip(calls, ids, strict=True)):
            item = build_enqueue(call, runtime.tasks.get(call.task), 0.0, runtime.durable, child_id,
                                 runtime.fair_queues)
            items.append(with_meta(item, **{PARENT: [self.job.id, name, index, total, ids[0]]}))
        return items

    def spawn(self, name: str, ids: list[str], items: list[Enqueue], look: bool) -> dict[str, Any]:
        """Store the children (`look`: an earlier run kept their ids and may have stored
        some: only those not found are stored), then say so (`<name>\\tstored`, with the
        ids as stored when a store gave some another: Redis shards mark theirs)."""
        self.store.kv_put(self.namespace, name + ENDED, counted(0, ids[0]), only_new=True)
        found = stored_jobs(self.store, ids) if look else [None] * len(ids)
        missing = [index for index, job in enumerate(found) if job is None]
        self.fence(before=name)
        pause_at("children.store")
        assert self.runtime is not None
        jobs = self.runtime.enqueue_items([items[index] for index in missing])
        pause_at("children.stored")
        actual = [job.id if job is not None else child_id for job, child_id in zip(found, ids, strict=True)]
        for index, job in zip(missing, jobs, strict=True):
            actual[index] = job.id
        record: dict[str, Any] = {"at": self.now(), "attempt": self.job.attempts}
        if actual != ids:
            record["ids"] = actual
        return self.put(name + STORED, record)

    def collect(self, name: str, ids: list[str], token: str, started: float, fresh: bool) -> list[Any]:
        """The children's results in order once all have ended; else leave the worker until
        the last one wakes the parent. `fresh`: this run stored them; a later run also looks
        at the children whose end no settle wrote."""
        total = len(ids)
        ends = self.ends(name, ids)
        if None in ends:
            raw = self.store.kv_get(self.namespace, name + ENDED)
            if raw is not None and loads(raw)["ended"] >= total:
                ends = self.read_ends(name, ids)
            elif not fresh and self.stalled(name, raw):
                ends = self.look_up(name, ids, token, self.read_ends(name, ids))
        left = ends.count(None)
        if left:
            recheck = min(RECHECK[1], max(RECHECK[0], self.now() - started))
            raise ChildrenSuspend(recheck, f"waiting for {left} of {total} child jobs in {name!r}", name, total)
        failed = [(i, end) for i, end in enumerate(ends) if end is not None and end["state"] != "succeeded"]
        if failed:
            index, end = failed[0]
            raise ChildFailed(name, index, ids[index], end["state"], self.child_value(end, "error"), len(failed))
        return [self.child_value(end, "result") for end in ends if end is not None]

    def child_value(self, end: dict[str, Any], field: str) -> Any:
        """A child's result or error from its end, opened when the child keeps it encrypted."""
        value = end.get(field)
        what = f"the {field} of child job {end.get('id')} of job {self.job.id}"
        if sealed(value) and isinstance(value, str):
            keyring = self.sealer.keyring if self.sealer is not None else None
            try:
                if keyring is None:
                    raise Unreadable(f"{what} is encrypted and this process has no encryption key")
                return keyring.open(value, bound(str(end.get("id")), field), what).decode()
            except Unreadable as exc:
                raise PayloadError(str(exc)) from None
        return self.open(value, bound(str(end.get("id")), field), what) if sealed_result(value) else value

    def stalled(self, name: str, raw: bytes | None) -> bool:
        """Whether no end was counted since the parent's last recheck (then it looks at its
        children's jobs itself: an end may have been lost); else it notes the count and
        waits again, as its children are ending."""
        count = loads(raw)["ended"] if raw is not None else None
        seen = self.load().get(name + SEEN)
        if seen is not None and seen.get("ended") == count:
            return True
        self.store.kv_put(self.namespace, name + SEEN, dumps({"ended": count}))
        return False

    def ends(self, name: str, ids: list[str]) -> list[dict[str, Any] | None]:
        records = self.load()
        return [records.get(f"{name}{CHILD}{child_id}") for child_id in ids]

    def read_ends(self, name: str, ids: list[str]) -> list[dict[str, Any] | None]:
        """The ends as the store holds them now (one read of the parent's records)."""
        records = self.load()
        for key, raw in self.store.kv_list(self.namespace).items():
            if key.startswith(name + CHILD):
                records[key] = loads(raw)
        return self.ends(name, ids)

    def look_up(self, name: str, ids: list[str], token: str,
                ends: list[dict[str, Any] | None]) -> list[dict[str, Any] | None]:
        """Children whose end no settle wrote (its worker killed after the settle; a child
        cancelled, or ended dead by recovery, without a run): their ends as their jobs show."""
        missing = [index for index, end in enumerate(ends) if end is None]
        found = dict(zip(missing, self.store.get_many([ids[i] for i in missing]), strict=True))
        over = {i: end_of(job, ids[i]) for i, job in found.items() if job is None or job.state.finished}
        if not over:
            return ends
        written = {ids[index]: dumps(end) for index, end in over.items()}
        record_ends(self.store, self.job.id, name, len(ids), token, written)
        return self.read_ends(name, ids)


def stored_jobs(store: Backend, ids: list[str]) -> list[Job | None]:
    """The children stored already, by the ids kept; on a store of several parts that
    marks the ids it stores (Redis shards: job.mark_id) each part's mark is looked for too."""
    found = store.get_many(ids)
    parts = len(store.parts())
    missing = [index for index, job in enumerate(found) if job is None]
    if parts > 1 and missing:
        marked = [(index, mark_id(ids[index], part)) for index in missing for part in range(parts)]
        for (index, _), job in zip(marked, store.get_many([m for _, m in marked]), strict=True):
            if job is not None:
                found[index] = job
    return found


def ids_of(name: str, record: dict[str, Any], stored: bytes | None) -> list[str]:
    """A gather's children's ids as stored (its `stored` mark's when a store changed them)."""
    ids: list[str] = (loads(stored).get("ids") if stored is not None else None) or record["ids"]
    return ids


def checked_calls(calls: object) -> None:
    """Each child a `task.call(...)` without a unique key or a connection (ConfigError)."""
    if not isinstance(calls, list):
        raise ConfigError(f"gather takes a list of task.call(...) values, got {type(calls).__name__}")
    if len(calls) > MOST_CHILDREN:
        raise ConfigError(f"a gather starts at most {MOST_CHILDREN:,} child jobs, got {len(calls):,}: "
                          "split them over several gathers")
    for call in calls:
        if not isinstance(call, Call):
            raise ConfigError(f"a child job is a task.call(...) value, got {call!r:.60}")
        if call.options.key is not None:
            raise ConfigError(f"a child job cannot have a unique key (got {call.options.key!r:.60}): its "
                              "parent names it by id")
        if call.options.connection is not None:
            raise ConfigError("a child job is stored by its parent's worker, not in a caller's transaction: "
                              "drop connection=")


def end_of(job: Job | None, job_id: str) -> dict[str, Any]:
    """A child's end as its parent keeps it, from the job as stored (None: purged)."""
    if job is None:
        return {"id": job_id, "state": str(JobState.CANCELLED), "error": "the child job is gone (purged) "
                "and its end was not recorded"}
    end: dict[str, Any] = {"id": job.id, "task": job.task, "state": str(job.state)}
    end.update({"result": job.result} if job.state == JobState.SUCCEEDED else {"error": job.error})
    return end


def counted(ended: int, token: str) -> bytes:
    """The count of a gather's written ends as stored (an object, as every record is), with
    the token of the gather it counts."""
    return dumps({"ended": ended, "gather": token})


def record_ends(store: Backend, parent: str, name: str, total: int, token: str, ends: dict[str, bytes]) -> bool:
    """Write the ends of children (by id) of the gather `token` (each only if none is
    written) and count those written here; True when this moved the count to `total`:
    the caller wakes the parent. Nothing is written for another gather: the parent's
    checkpoints expired with it, or the gather was dropped (`retry_from`) and run again."""
    namespace = STEPS + parent
    raw = store.kv_get(namespace, name + ENDED)
    if raw is None or loads(raw).get("gather") != token:
        return False
    written = store.kv_put_many([(namespace, f"{name}{CHILD}{child_id}", end) for child_id, end in ends.items()],
                                only_new=True)
    while written and raw is not None:
        count = loads(raw)
        if count.get("gather") != token:
            return False
        if store.kv_swap(namespace, name + ENDED, raw, counted(count["ended"] + written, token)):
            return bool(count["ended"] < total <= count["ended"] + written)
        raw = store.kv_get(namespace, name + ENDED)
    return False


def final_state(outcome: Outcome) -> str | None:
    """How a settled outcome ended its job, if it did (as the store keeps it)."""
    kind = outcome.kind
    if kind is OutcomeKind.CANCELLED or (outcome.job.cancel_requested and kind is not OutcomeKind.SUCCEEDED):
        return str(JobState.CANCELLED)
    if kind is OutcomeKind.SUCCEEDED:
        return str(JobState.SUCCEEDED)
    return str(JobState.DEAD) if kind is OutcomeKind.DEAD else None


class ChildEnds(Middleware):
    """Installed by every App: a settled child's end is written in its parent's records and
    counted (the count's last writer wakes the parent), in a few store calls per batch; a
    parent that left the worker while its last child ended is woken; a cancelled parent's
    unfinished children are cancelled."""

    needs_settled_job = False
    settles = staticmethod(with_children)

    def __init__(self, store: Callable[[], Backend], sealer: Callable[[], Sealer | None] = lambda: None) -> None:
        self.store = store
        self.sealer = sealer  # the App's encryption at rest: a child's end keeps its values as the child does

    def after_settle_many(self, settled: list[Settled]) -> None:
        store, sealer = self.store(), self.sealer()
        groups: dict[tuple[str, str, int, str], dict[str, bytes]] = {}
        for outcome, exc in settled:
            if sealer is not None:  # as the child job keeps them: sealed, bound to the child
                outcome = sealer.seal_outcomes([outcome])[0]
            job = outcome.job
            place = job.meta.get(PARENT)
            state = final_state(outcome)
            if place is not None and state is not None:
                parent, name, _, total, token = place
                end: dict[str, Any] = {"id": job.id, "task": job.task, "state": state}
                end.update({"result": outcome.result} if state == "succeeded" else {"error": outcome.error})
                groups.setdefault((parent, name, total, token), {})[job.id] = dumps(end, "a child job's end")
            if isinstance(exc, ChildrenSuspend):
                woken_if_over(store, job.id, exc.gather, exc.total)
            if state == str(JobState.CANCELLED):
                cancel_children(store, job.id)
        for (parent, name, total, token), ends in groups.items():
            try:
                if record_ends(store, parent, name, total, token, ends):
                    store.wake(parent)
            except DeferqError as exc:
                log.warning("job %s: could not write the end of %d of its child jobs (%s); it looks for them "
                            "itself within %g s", parent, len(ends), exc, RECHECK[1])


def woken_if_over(store: Backend, parent: str, name: str, total: int) -> None:
    """A parent just stored as waiting for its children, whose last child ended meanwhile
    (its wake came while the parent still ran): woken now."""
    raw = store.kv_get(STEPS + parent, name + ENDED)
    if raw is not None and loads(raw)["ended"] >= total:
        store.wake(parent)


def gathers(records: dict[str, bytes]) -> list[tuple[str, dict[str, Any]]]:
    """A job's gathers (name, checkpoint), in the order it reached them."""
    found = []
    for key, raw in records.items():
        if "\t" not in key:
            record = loads(raw)
            if record.get("kind") == KIND:
                found.append((key, record))
    return sorted(found, key=lambda item: int(item[1]["index"]))


def children(store: Backend, job_id: str, sealer: Sealer | None = None) -> list[dict[str, Any]]:
    """A job's child jobs, gather by gather in order: each with its gather's name (`step`),
    its place (`index`), id, task, state, and its result or error once it ended."""
    records = store.kv_list(STEPS + job_id)
    rows = []
    for name, record in gathers(records):
        ids = ids_of(name, record, records.get(name + STORED))
        ends = [records.get(f"{name}{CHILD}{child_id}") for child_id in ids]
        missing = [index for index, end in enumerate(ends) if end is None]
        jobs = dict(zip(missing, store.get_many([ids[i] for i in missing]), strict=True))
        for index, child_id in enumerate(ids):
            raw = ends[index]
            end = loads(raw) if raw is not None else None
            job = jobs.get(index)
            row: dict[str, Any] = {"step": name, "index": index, "id": child_id}
            if end is not None:
                row.update(task=end.get("task"), state=end["state"],
                           result=shown_value(end.get("result"), bound(child_id, "result"), sealer),
                           error=shown_value(end.get("error"), bound(child_id, "error"), sealer))
            else:
                row.update(task=job.task if job else None, state=str(job.state) if job else None, result=None,
                           error=shown_value(job.error, bound(child_id, "error"), sealer) if job else None)
            rows.append(row)
    return rows


def child_ids(store: Backend, job_id: str, shown: int) -> list[str]:
    """The ids of a job's first `shown` child jobs, gather by gather (its page's links)."""
    records = store.kv_list(STEPS + job_id)
    ids = [child_id for name, record in gathers(records)
           for child_id in ids_of(name, record, records.get(name + STORED))]
    return ids[:shown]


def cancel_children(store: Backend, job_id: str, depth: int = 0) -> int:
    """Cancel a cancelled job's unfinished children (and theirs, MOST_DEPTH generations
    down); returns how many were cancelled. Children that ran may have children of their own."""
    records = store.kv_list(STEPS + job_id)
    unfinished = [child_id for name, record in gathers(records)
                  for child_id in ids_of(name, record, records.get(name + STORED))
                  if f"{name}{CHILD}{child_id}" not in records]
    cancelled = 0
    for child_id, job in zip(unfinished, store.get_many(unfinished), strict=True):
        if job is None or job.state.finished or not store.cancel(child_id):
            continue
        cancelled += 1
        if job.attempts and depth < MOST_DEPTH:
            cancelled += cancel_children(store, child_id, depth + 1)
    return cancelled


def row(name: str, record: dict[str, Any], records: dict[str, Any]) -> dict[str, Any]:
    """A gather's line on the job's timeline: how many children, how many ended and failed."""
    ids = (records.get(name + STORED) or {}).get("ids") or record["ids"]
    total = len(ids)
    ends = [records.get(f"{name}{CHILD}{child_id}") for child_id in ids]
    over = [end for end in ends if end is not None]
    failed = sum(1 for end in over if end["state"] in FAILED_STATES)
    state = "waiting" if len(over) < total else "failed" if failed else "done"
    return {"state": state, "total": total, "ended": len(over), "failed": failed}


def place_of(job: Job) -> dict[str, Any] | None:
    """The parent a child job was started by: {id, step, index}, or None."""
    place: Sequence[Any] | None = job.meta.get(PARENT)
    return None if place is None else {"id": place[0], "step": place[1], "index": place[2]}
