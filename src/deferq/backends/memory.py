"""memory:// — jobs in this process's memory, for users' unit tests.

Nothing survives the process. Simple over fast: operations scan the jobs, which is
fine for the thousands of jobs a test makes.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, TypedDict

from ..job import Job, JobState, carry, decode_payload
from . import deps, fair
from .base import (
    BEHIND,
    HOLD_BATCH,
    HOLD_SLACK,
    LEVELS,
    Backend,
    Enqueue,
    Heartbeat,
    OnConflict,
    Outcome,
    QueueStats,
    finished_only,
    state_for_waiting,
)
from .history import Ended, MemoryHistory, recovered
from .search import JobPage, JobQuery, is_int, scan_page

_WAITING = JobState.QUEUED  # stored state of every waiting job; see base.py


class MemoryBackend(MemoryHistory, Backend):
    schemes = ("memory",)

    def __init__(self, url: str = "memory://", **_: Any) -> None:
        self._jobs: dict[str, Job] = {}
        self._order: dict[str, int] = {}  # enqueue order, for FIFO among equal due times
        self._vtime: dict[str, float] = {}  # job id -> virtual time, while it waits at a fair level (fair.py)
        self._fair_next: dict[tuple[object, str], float] = {}  # ((queue, level), key) -> its next virtual time
        self._seq = itertools.count()
        self._kv: dict[tuple[str, str], tuple[bytes, float | None]] = {}
        self._paused: dict[str, float] = {}  # queue -> when it was paused
        self._rates: dict[str, float] = {}  # rate limit key -> its next free time
        self._slots: dict[str, dict[str, int]] = {}  # concurrency limit scope -> its holders' fences
        self._fences: dict[str, int] = {}  # concurrency limit scope -> the last fence it granted
        self._holds: dict[str, dict[str, float]] = {}  # limit name -> {held job id: its due time}
        self._changed = threading.Condition()
        self._children: dict[str, dict[str, bool]] = {}  # parent id -> {child id: after_any}
        self._blockers: dict[str, set[str]] = {}  # blocked child id -> ids of unfinished parents
        self.clock_offset = 0.0  # seconds added to the wall clock: see advance()

    local_clock = True  # now() is this machine's clock (time travel included): no round trip

    def now(self) -> float:
        return time.time() + self.clock_offset

    def advance(self, seconds: float) -> None:
        """Move this store's clock forward: delayed jobs come due (time travel in tests)."""
        with self._changed:
            self.clock_offset += seconds
            self._changed.notify_all()

    def _view(self, job: Job, now: float) -> Job:
        if job.state == _WAITING:
            return replace(job, state=state_for_waiting(job.run_at, now), priority=job.priority % LEVELS)
        return replace(job, priority=job.priority % LEVELS) if job.priority >= LEVELS else job

    def _unfinished_with_key(self, key: str) -> Job | None:
        """The job holding a unique key (one waiting behind it does not hold it)."""
        for job in self._jobs.values():
            if job.key == key and not job.state.finished and job.priority < BEHIND:
                return job
        return None

    def _behind(self, key: str) -> Job | None:
        """The job waiting behind the running holder of `key`, if any."""
        for job in self._jobs.values():
            if job.key == key and job.state == _WAITING and job.priority >= BEHIND:
                return job
        return None

    def enqueue_many(self, items: Sequence[Enqueue], connection: Any = None) -> list[Job]:
        self.refuse_connection(connection)
        with self._changed:
            now = self.now()
            stored = []
            floors = self._fair_floors(items, now)
            for item in items:
                job = item.job
                holder = self._unfinished_with_key(job.key) if job.key else None
                behind = self._behind(job.key) if job.key else None
                if holder is None and behind is not None:  # its holder is gone: it holds the key
                    self._step_up()
                    holder, behind = self._unfinished_with_key(job.key or ""), None
                recent = self.get_by_key(job.key) if job.key and item.unique_for and holder is None else None
                if recent is not None and behind is None and item.answered_by(recent, now):
                    stored.append(recent)  # the window, checked under the lock that stores
                elif holder is None and behind is None:
                    stored.append(self._insert(item, now, floors=floors))
                elif item.on_conflict is OnConflict.IGNORE:
                    stored.append(self._view(behind or holder, now))  # type: ignore[arg-type]
                elif target := behind or (holder if holder and holder.state == _WAITING else None):
                    self._jobs[target.id] = read_back(item, item.updated(target, now).evolve(state=_WAITING))
                    stored.append(self._view(self._jobs[target.id], now))
                else:  # the holder runs: never changed; the new job waits behind it
                    stored.append(self._insert(item, now, BEHIND))
            linked = [(item, stored[i]) for i, item in enumerate(items) if item.after]
            if linked:
                stored = self._link(linked, stored)
            self._changed.notify_all()
            return stored

    def _link(self, linked: list[tuple[Enqueue, Job]], stored: list[Job]) -> list[Job]:
        """Block each job until its parents settle (deps.py), or cancel it now when one
        already failed; all or nothing: an unknown parent undoes the whole call."""
        for item, job in linked:
            for parent in item.after:
                if parent not in self._jobs:
                    for gone in stored:
                        self._jobs.pop(gone.id, None)
                    raise deps.unknown_parent(job.id, parent)
        views = {job.id: job for job in stored}
        for item, job in linked:
            verdicts = {p: deps.verdict(self._jobs[p].state, item.after_any) for p in item.after}
            failed = next((p for p, v in verdicts.items() if v == deps.CANCEL), None)
            waiting = {p for p, v in verdicts.items() if v == deps.WAIT}
            if failed is not None:
                error, now = deps.reason(failed, self._jobs[failed].state), self.now()
                self._jobs[job.id] = self._jobs[job.id].evolve(state=JobState.CANCELLED, error=error,
                                                               finished_at=now, updated_at=now)
            elif waiting:
                self._jobs[job.id] = self._jobs[job.id].evolve(state=JobState.BLOCKED, updated_at=self.now())
                self._blockers[job.id] = waiting
                for parent in waiting:
                    self._children.setdefault(parent, {})[job.id] = item.after_any
            views[job.id] = self._view(self._jobs[job.id], self.now())
        return [views[job.id] for job in stored]

    def _release(self, ids: Iterable[str]) -> None:
        """The children of the finished jobs among `ids`: each edge taken away once
        (deps.py); a cancelled child passes the cancel on to its own children."""
        todo = list(ids)
        while todo:
            parent = todo.pop()
            found = self._jobs.get(parent)
            state = found.state if found else None
            if deps.verdict(state, True) == deps.WAIT:
                continue
            for child, after_any in self._children.pop(parent, {}).items():
                blockers = self._blockers.get(child, set())
                blockers.discard(parent)
                job = self._jobs.get(child)
                if job is None or job.state != JobState.BLOCKED:
                    continue
                if deps.verdict(state, after_any) == deps.CANCEL:
                    self._jobs[child] = job.evolve(state=JobState.CANCELLED, error=deps.reason(parent, state),
                                                   finished_at=self.now(), updated_at=self.now())
                    self._blockers.pop(child, None)
                    todo.append(child)
                elif not blockers:
                    self._blockers.pop(child, None)
                    now = self.now()
                    self._jobs[child] = job.evolve(state=_WAITING, run_at=max(job.run_at, now), updated_at=now)

    def _insert(self, item: Enqueue, now: float, raise_by: int = 0, floors: dict[object, float] | None = None
                ) -> Job:
        job = read_back(item, item.stored(now))
        if floors is not None and fair.due_fair(item):
            scope = (job.queue, job.priority + fair.FAIR)
            self._vtime[job.id] = fair.virtual_times([(scope, job.fair_key or "", item.fair_weight)], floors,
                                                     self._fair_next)[0]
            raise_by += fair.FAIR
        self._jobs[job.id] = job.evolve(state=_WAITING, priority=job.priority + raise_by)
        self._order[job.id] = next(self._seq)
        return job

    def _fair_floors(self, items: Sequence[Enqueue], now: float) -> dict[object, float]:
        """Each (queue, fair level) floor the batch needs (fair.py): the least virtual time
        waiting there, else the most any key has reached."""
        scopes = {(item.job.queue, item.job.priority + fair.FAIR) for item in items if item.job.fair_key}
        floors: dict[object, float] = {}
        for scope in scopes:
            waiting = [self._vtime[j.id] for j in self._jobs.values()
                       if j.state == _WAITING and (j.queue, j.priority) == scope and j.id in self._vtime]
            reached = [at for (at_scope, _), at in self._fair_next.items() if at_scope == scope]
            floors[scope] = floor = min(waiting) if waiting else max(reached, default=0.0)
            for name in [name for name, at in self._fair_next.items() if name[0] == scope and at < floor]:
                del self._fair_next[name]
        return floors

    def _step_up(self) -> None:
        """A job waiting behind the holder of its key takes the key once the holder has
        finished (or is gone): called after every change that may end a holder."""
        for job in list(self._jobs.values()):
            if job.state != _WAITING or job.priority < BEHIND:
                continue
            if self._unfinished_with_key(job.key or "") is None:
                self._jobs[job.id] = replace(job, priority=job.priority - BEHIND)

    def reserve(
        self, queues: Sequence[str], limit: int, worker: str, lease: float, priorities: Sequence[int]
    ) -> list[Job]:
        expired: list[Job] = []
        with self._changed:
            now = self.now()
            rank = {p: i for i, p in enumerate(fair.levels_of(priorities))}  # levels not named are not taken
            due = [
                j
                for j in self._jobs.values()
                if j.state == _WAITING and j.queue in queues and j.run_at <= now and j.priority in rank
                and j.queue not in self._paused
            ]
            vtime = self._vtime
            due.sort(key=lambda j: (rank[j.priority], vtime.get(j.id, 0.0) if j.priority >= fair.FAIR
                                    else j.run_at, self._order[j.id]))
            taken = []
            for job in due[:limit]:
                if job.expires_at is not None and job.expires_at <= now:  # never run: cancelled
                    self._jobs[job.id] = replace(job, state=JobState.CANCELLED, error="expired", finished_at=now,
                                                 updated_at=now)
                    expired.append(job)
                    self._step_up()
                    self._release([job.id])
                    continue
                fresh = job.last_worker is None
                job = replace(
                    job,
                    state=JobState.ACTIVE,
                    attempts=job.attempts + 1,
                    worker=worker,
                    lease_until=now + lease,
                    last_worker=worker,
                    updated_at=now,
                )
                self._jobs[job.id] = job  # keeps its virtual time: a lease that expires puts it back in place
                taken.append(self._view(job, now))
                if fresh:  # never leased before: no durable-step checkpoints (with_checkpoints)
                    carry(taken[-1], {})
        self.count_ended((job.queue, job.task, "expired") for job in expired)
        return taken

    def _owned(self, job: Job) -> Job | None:
        current = self._jobs.get(job.id)
        if (
            current is not None
            and current.state == JobState.ACTIVE
            and current.worker == job.worker
            and current.attempts == job.attempts
        ):
            return current
        return None

    def heartbeat(self, jobs: Sequence[Job], lease: float) -> Heartbeat:
        with self._changed:
            lost = self._fenced(jobs, lambda job, current: replace(current, lease_until=self.now() + lease))
            asked = [job.id for job in jobs if job.id not in lost and self._jobs[job.id].cancel_requested]
            return Heartbeat(lost, asked)

    def record_progress(self, jobs: Sequence[Job]) -> set[str]:
        def report(job: Job, current: Job) -> Job:
            return replace(current, progress=job.progress, progress_message=job.progress_message)

        return self._fenced(jobs, report)

    def _fenced(self, jobs: Sequence[Job], change: Callable[[Job, Job], Job]) -> set[str]:
        """Apply `change(job, stored)` to the jobs whose lease holds; ids of the others."""
        with self._changed:
            lost = set()
            for job in jobs:
                current = self._owned(job)
                if current is None:
                    lost.add(job.id)
                else:
                    self._jobs[job.id] = change(job, current)
            return lost

    def settle(self, outcomes: Sequence[Outcome]) -> list[bool]:
        with self._changed:
            now = self.now()
            applied = []
            for outcome in outcomes:
                current = self._owned(outcome.job)
                if current is None:
                    applied.append(False)
                    continue
                self._jobs[current.id] = _settled(current, outcome, now)
                applied.append(True)
                if self._children:
                    self._release([current.id])
            if any(outcome.job.key for outcome in outcomes):
                self._step_up()
            self._changed.notify_all()
            return applied

    def recover_expired(self) -> int:
        ended: list[Ended] = []
        with self._changed:
            now = self.now()
            count = 0
            for job in list(self._jobs.values()):
                if job.state == JobState.ACTIVE and (job.lease_until or 0) < now:
                    self._jobs[job.id] = recovered_job = _expired(job, now)
                    ended += recovered(job.queue, job.task, str(recovered_job.state))
                    self._release([job.id])
                    count += 1
            self._step_up()  # also after any change that ended a holder some other way
            if count:
                self._changed.notify_all()
        self.count_ended(ended)
        return count

    def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        with self._changed:
            now = self.now()
            next_due = min(
                (j.run_at for j in self._jobs.values()
                 if j.state == _WAITING and j.queue in queues and j.queue not in self._paused),
                default=now + timeout,
            )
            if next_due > now:
                self._changed.wait(min(timeout, next_due - now))

    def dependents(self, job_id: str) -> list[str]:
        with self._changed:
            return list(self._children.get(job_id, ()))

    def changes(self, job_id: str, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait(timeout)

    def get(self, job_id: str) -> Job | None:
        with self._changed:
            job = self._jobs.get(job_id)
            return self._view(job, self.now()) if job else None

    def get_by_key(self, key: str) -> Job | None:
        with self._changed:
            matches = [j for j in self._jobs.values() if j.key == key]
            if not matches:
                return None
            return self._view(max(matches, key=lambda j: self._order[j.id]), self.now())

    def cancel(self, job_id: str) -> bool:
        with self._changed:
            job = self._jobs.get(job_id)
            if job is None or job.state.finished:
                return False
            if job.state == JobState.ACTIVE:  # its worker hears it at the next heartbeat
                self._jobs[job_id] = replace(job, cancel_requested=True, updated_at=self.now())
            else:
                self._jobs[job_id] = replace(job, state=JobState.CANCELLED, finished_at=self.now(),
                                             updated_at=self.now())
                self._step_up()
                self._release([job_id])
            return True

    def wake(self, job_id: str) -> bool:
        with self._changed:
            job, now = self._jobs.get(job_id), self.now()
            if job is None or job.state != _WAITING or job.run_at <= now:
                return False
            self._jobs[job_id] = replace(job, run_at=now, updated_at=now)
            self._changed.notify_all()
            return True

    def retry_dead(self, job_id: str) -> bool:
        with self._changed:
            job = self._jobs.get(job_id)
            if job is None or job.state != JobState.DEAD:
                return False
            if job.key and self._unfinished_with_key(job.key):
                return False
            self._jobs[job_id] = replace(
                job, state=_WAITING, attempts=0, run_at=self.now(), finished_at=None, updated_at=self.now()
            )
            self._order[job_id] = next(self._seq)
            self._changed.notify_all()
            return True

    def rerun(self, job_id: str) -> bool:
        with self._changed:
            job = self._jobs.get(job_id)
            if job is None or not job.state.finished:
                return False
            if job.key and self._unfinished_with_key(job.key):
                return False
            self._jobs[job_id] = replace(job, state=_WAITING, attempts=0, run_at=self.now(), finished_at=None,
                                         updated_at=self.now(), result=None, cancel_requested=False,
                                         waits_for=None)
            self._order[job_id] = next(self._seq)
            self._changed.notify_all()
            return True

    def run_now(self, job_id: str) -> bool:
        with self._changed:
            job = self._jobs.get(job_id)
            now = self.now()
            if job is None or job.state != _WAITING or job.run_at <= now:
                return False
            self._jobs[job_id] = replace(job, run_at=now, updated_at=now)
            self._changed.notify_all()
            return True

    def list_jobs(self, state: JobState, queue: str | None = None, limit: int = 100) -> list[Job]:
        with self._changed:
            now = self.now()
            views = [self._view(j, now) for j in self._jobs.values()]
            found = [j for j in views if j.state == state and queue in (None, j.queue)]
            found.sort(key=lambda j: (j.finished_at or j.run_at, self._order[j.id]), reverse=True)
            return found[:limit]

    def find_jobs(self, query: JobQuery) -> JobPage:
        """Newest enqueued first; the position is the enqueue order (every job is looked
        at: a text search here is a scan, and always complete)."""

        def pages(position: int | None, size: int) -> list[tuple[Job | None, int]]:
            with self._changed:
                now = self.now()
                order = self._order
                chosen = sorted(
                    (order[i], job)
                    for i, job in self._jobs.items()
                    if (position is None or order[i] < position) and query.queue in (None, job.queue)
                )
                views = [(self._view(job, now), seq) for seq, job in reversed(chosen)]
            wanted: list[tuple[Job | None, int]] = [
                (job, seq) for job, seq in views if query.state in (None, job.state)
            ]
            return wanted[:size]

        return scan_page(replace(query, window=len(self._jobs) + 1), pages, is_int)

    def purge(self, states: Iterable[JobState], older_than: float = 0.0) -> int:
        states = set(finished_only(states))
        with self._changed:
            limit = self.now() - older_than
            doomed = [j.id for j in self._jobs.values() if j.state in states and (j.finished_at or 0) <= limit]
            for job_id in doomed:
                del self._jobs[job_id]
                del self._order[job_id]
            return len(doomed)

    def stats(self) -> dict[str, QueueStats]:
        with self._changed:
            now = self.now()
            result: dict[str, QueueStats] = {}
            for job in self._jobs.values():
                view = self._view(job, now)
                stats = result.setdefault(job.queue, QueueStats())
                stats.counts[view.state] += 1
                if view.state == JobState.QUEUED:
                    stats.oldest_wait = max(stats.oldest_wait, now - job.run_at)
            return result

    def delete(self, job_id: str) -> bool:
        with self._changed:
            job = self._jobs.get(job_id)
            if job is None or not job.state.finished:
                return False
            del self._jobs[job_id], self._order[job_id]
            return True

    def set_remark(self, job_id: str, remark: str | None) -> bool:
        with self._changed:
            job = self._jobs.get(job_id)
            if job is None:
                return False
            self._jobs[job_id] = replace(job, remark=remark, updated_at=self.now())
            return True

    def reseal(self, job_id: str, old: str, new: str) -> bool:
        with self._changed:
            job = self._jobs.get(job_id)
            if job is None:
                return False
            changes = resealed(job, old, new)
            if changes:
                self._jobs[job_id] = replace(job, **changes)
            return bool(changes)

    def pause(self, queue: str) -> bool:
        with self._changed:
            if queue in self._paused:
                return False
            self._paused[queue] = self.now()
            return True

    def resume(self, queue: str) -> bool:
        with self._changed:
            found = self._paused.pop(queue, None) is not None
            self._changed.notify_all()
            return found

    def paused(self) -> dict[str, float]:
        with self._changed:
            return dict(self._paused)

    # -- kv ----------------------------------------------------------------------

    def _live(self, namespace: str, key: str) -> bytes | None:
        entry = self._kv.get((namespace, key))
        if entry is None or (entry[1] is not None and entry[1] <= self.now()):
            return None
        return entry[0]

    def kv_put(
        self, namespace: str, key: str, value: bytes, ttl: float | None = None, only_new: bool = False
    ) -> bool:
        with self._changed:
            if only_new and self._live(namespace, key) is not None:
                return False
            expires = self.now() + ttl if ttl else None
            self._kv[(namespace, key)] = (value, expires)
            return True

    def kv_swap(self, namespace: str, key: str, expected: bytes, value: bytes, ttl: float | None = None) -> bool:
        with self._changed:
            if self._live(namespace, key) != expected:
                return False
            self._kv[(namespace, key)] = (value, self.now() + ttl if ttl else None)
            return True

    def rate_take(self, key: str, interval: float) -> tuple[float, float]:
        with self._changed:
            now = self.now()
            turn = max(self._rates.get(key, now), now)
            self._rates[key] = turn + interval
            return turn, now

    def limit_hold(self, names: Sequence[str], held: Sequence[tuple[Job, float]]) -> None:
        with self._changed:
            now = self.now()
            for name in names:
                notes = self._holds.setdefault(name, {})
                for job, due in held:
                    if len(notes) >= 64 and len(notes) & (len(notes) - 1) == 0:  # at powers of two: amortized
                        for job_id in [i for i, at in notes.items() if at <= now]:
                            del notes[job_id]
                    notes[job.id] = due

    def limit_release(self, name: str) -> int:
        released = 0
        while True:
            with self._changed:
                notes, now = self._holds.get(name, {}), self.now()
                batch = list(itertools.islice(notes.items(), HOLD_BATCH))
                for job_id, due in batch:
                    del notes[job_id]
                    job = self._jobs.get(job_id)
                    if job is not None and job.state == _WAITING and job.run_at > now \
                            and abs(job.run_at - due) <= HOLD_SLACK:
                        self._jobs[job_id] = replace(job, run_at=now, updated_at=now)
                        released += 1
                if not notes:
                    self._holds.pop(name, None)
                self._changed.notify_all()
            if len(batch) < HOLD_BATCH:
                return released

    def slot_holders(self, scope: str) -> dict[str, int]:
        with self._changed:
            return dict(sorted(self._slots.get(scope, {}).items()))

    def slot_take(self, scope: str, limit: int, holder: str, drop: Sequence[str] = ()) -> int:
        with self._changed:
            holders = self._slots.setdefault(scope, {})
            for gone in drop:
                holders.pop(gone, None)
            if holder not in holders:
                if len(holders) >= limit:
                    return 0
                holders[holder] = self._fences[scope] = self._fences.get(scope, 0) + 1
            return holders[holder]

    def slot_release(self, scope: str, holder: str) -> bool:
        with self._changed:
            return self._slots.get(scope, {}).pop(holder, None) is not None

    def kv_expire(self, namespace: str, ttl: float) -> int:
        with self._changed:
            live = [(key, value) for (ns, key), (value, _) in self._kv.items()
                    if ns == namespace and self._live(ns, key) is not None]
            for key, value in live:
                self._kv[(namespace, key)] = (value, self.now() + ttl)
            return len(live)

    def kv_get(self, namespace: str, key: str) -> bytes | None:
        with self._changed:
            return self._live(namespace, key)

    def kv_delete(self, namespace: str, key: str) -> bool:
        with self._changed:
            live = self._live(namespace, key) is not None
            self._kv.pop((namespace, key), None)
            return live

    def kv_list(self, namespace: str) -> dict[str, bytes]:
        with self._changed:
            keys = [k for ns, k in self._kv if ns == namespace]
            return {k: v for k in keys if (v := self._live(namespace, k)) is not None}

    def kv_list_many(self, namespaces: Sequence[str]) -> dict[str, dict[str, bytes]]:
        wanted: dict[str, dict[str, bytes]] = {namespace: {} for namespace in namespaces}
        with self._changed:
            for ns, k in [key for key in self._kv if key[0] in wanted]:
                if (v := self._live(ns, k)) is not None:
                    wanted[ns][k] = v
        return wanted


class _Unleased(TypedDict):
    """The fields every outcome clears (the job is no longer held by a worker), and when."""

    worker: None
    lease_until: None
    updated_at: float
    waits_for: str | None


def _settled(job: Job, outcome: Outcome, now: float) -> Job:
    """The job after an outcome: the one place the memory store applies outcomes."""
    common: _Unleased = {"worker": None, "lease_until": None, "updated_at": now,
                         "waits_for": outcome.waits_for if outcome.kind == "snooze" else None}
    if outcome.chunk_call is not None:
        job = job.evolve(chunk_call=outcome.chunk_call)
    if job.cancel_requested and outcome.kind != "succeeded" or outcome.kind == "cancelled":
        error = outcome.error if outcome.kind in ("cancelled", "dead", "retry") else job.error
        return replace(job, state=JobState.CANCELLED, error=error, finished_at=now, **common)
    if outcome.kind == "succeeded":
        return replace(job, state=JobState.SUCCEEDED, result=outcome.result, finished_at=now, **common)
    if outcome.kind == "retry":
        return replace(job, state=_WAITING, run_at=now + outcome.delay, error=outcome.error,
                       priority=fair.plain_level(job.priority), **common)
    if outcome.kind == "dead":
        return replace(job, state=JobState.DEAD, error=outcome.error, finished_at=now, **common)
    if outcome.kind == "release":
        return replace(job, state=_WAITING, attempts=job.attempts - 1, **common)
    if outcome.kind == "snooze":
        due = now + outcome.delay if outcome.due is None else outcome.due
        return replace(job, state=_WAITING, attempts=job.attempts - 1, run_at=due,
                       priority=fair.plain_level(job.priority), **common)
    raise ValueError(f"unknown outcome {outcome.kind!r}")


def _expired(job: Job, now: float) -> Job:
    error = f"lease expired (worker {job.worker} stopped heartbeating)"
    common: _Unleased = {"worker": None, "lease_until": None, "updated_at": now, "waits_for": None}
    if job.cancel_requested:
        return replace(job, state=JobState.CANCELLED, error=error, finished_at=now, **common)
    if job.attempts >= job.max_attempts:
        return replace(job, state=JobState.DEAD, error=error, finished_at=now, **common)
    return replace(job, state=_WAITING, error=error, **common)


def read_back(item: Enqueue, job: Job) -> Job:
    """`job` with the arguments and meta of `item`'s payload, as a real store keeps and a
    worker reads them (sealed, when the App encrypts): never the item's own plain ones."""
    if not item.payload:
        return job
    args, kwargs, meta = decode_payload(item.payload)
    return job.evolve(args=args, kwargs=kwargs, meta=meta)


def resealed(job: Job, old: str, new: str) -> dict[str, Any]:
    """The fields of `job` (as this store keeps it: its payload decoded) that held the
    encrypted text `old`, with `new` in its place: a value of its kwargs or result, its
    error or progress message (what the other stores' text replace finds)."""
    def swap(mapping: Any) -> Any:
        if type(mapping) is dict and old in mapping.values():
            return {name: new if value == old else value for name, value in mapping.items()}
        return None

    changes = {"kwargs": swap(job.kwargs), "result": swap(job.result),
               "error": new if job.error == old else None,
               "progress_message": new if job.progress_message == old else None}
    return {name: value for name, value in changes.items() if value is not None}
