"""The jobs of chunk tasks a worker leased, gathered into calls (chunks.py).

A leased job of a chunk task waits here, leased and heartbeated like a job leased
ahead, until its task has `size` of them waiting, or the first of them has waited
`wait` seconds in this worker: then they leave as one `ChunkCall`, in the order leased,
for a free slot. What the store leased in one claim came in its claim order (priority,
due time, a fair queue's round of keys), so a chunk keeps it: no fair key fills a call
while other keys' jobs wait in the same claim.

Not thread-safe: the worker calls it with its lock held.
"""

from __future__ import annotations

from collections import deque
from operator import attrgetter, itemgetter
from typing import NamedTuple

from ..attempt.runner import stopped
from ..backends.base import Heartbeat, Outcome, OutcomeKind
from ..context import JobControl
from ..job import Job
from ..registry import TaskSpec

# A call whose first job waited in the worker this long (seconds) is checked against the
# store just before the function sees it: longer than a claim's round trip, so a chunk
# filled by the claims of a busy queue goes without the check, and any wait for `wait`
# seconds or for more claims meets it.
RECHECK = 0.05
_JOB, _EXPIRES_AT, _NONE = itemgetter(0), attrgetter("expires_at"), {None}


class ChunkCall(NamedTuple):
    """One call of a chunk task: its spec (the first job's), its jobs, in order, and
    when the first of them was gathered (monotonic: how long they waited in the worker)."""

    spec: TaskSpec
    members: list[tuple[Job, JobControl]]
    since: float = 0.0


class Gather:
    def __init__(self) -> None:
        # task name -> its waiting jobs: (spec, job, control, since) in the order leased
        self.waiting: dict[str, deque[tuple[TaskSpec, Job, JobControl, float]]] = {}
        self.count = 0  # jobs waiting here, of every task
        self.expired: list[Job] = []  # jobs whose expiry passed while they waited (ripe)

    def __bool__(self) -> bool:
        return self.count > 0

    def add(self, spec: TaskSpec, job: Job, control: JobControl, now: float) -> None:
        self.add_many([(spec, job, control)], now)

    def add_many(self, leased: list[tuple[TaskSpec, Job, JobControl]], now: float) -> None:
        """Jobs of chunk tasks one claim leased, in its order (mostly of one task: its
        waiting line is looked up once for a run of them)."""
        waiting, name, line = self.waiting, None, None
        for spec, job, control in leased:
            if spec.name != name or line is None:
                name = spec.name
                line = waiting.get(name)
                if line is None:
                    line = waiting[name] = deque()
            line.append((spec, job, control, now))
        self.count += len(leased)

    def ripe(self, now: float, everything: bool = False, wall: float | None = None) -> list[ChunkCall]:
        """Take the calls that are due: every full chunk, and the rest of a task whose
        first job has waited its `wait` (or all that waits, with `everything`). A job
        whose expiry passed by `wall` (epoch seconds) is left out, into `expired`."""
        calls: list[ChunkCall] = []
        for name, line in list(self.waiting.items()):
            chunk = line[0][0].chunk
            assert chunk is not None
            while len(line) >= chunk.size or (line and (everything or now - line[0][3] >= chunk.wait)):
                spec, _, _, since = line[0]
                members = [line.popleft()[1:3] for _ in range(min(chunk.size, len(line)))]  # (job, control)
                self.count -= len(members)
                # any job with an expiry (over the call's jobs in C: most have none)
                if wall is not None and set(map(_EXPIRES_AT, map(_JOB, members))) != _NONE:
                    self.expired += [job for job, _ in members if _expired(job, wall)]
                    members = [(job, control) for job, control in members if not _expired(job, wall)]
                if members:
                    calls.append(ChunkCall(spec, members, since))
            if not line:
                del self.waiting[name]
        return calls

    def drop(self, ids: set[str] | None) -> list[Job]:
        """Take the jobs of `ids` (or all) out of the waiting lines."""
        dropped: list[Job] = []
        for name, line in list(self.waiting.items()):
            kept = deque(item for item in line if ids is not None and item[1].id not in ids)
            dropped += [item[1] for item in line if ids is None or item[1].id in ids]
            if kept:
                self.waiting[name] = kept
            else:
                del self.waiting[name]
        self.count -= len(dropped)
        return dropped

    def next_due(self) -> float | None:
        """When the earliest waiting line is due by its wait (monotonic), if any waits."""
        dues = [since + (spec.chunk.wait if spec.chunk else 0.0)
                for spec, _, _, since in (line[0] for line in self.waiting.values())]
        return min(dues) if dues else None


def sort_out(call: ChunkCall, beat: Heartbeat, paused: dict[str, float], wall: float
             ) -> tuple[list[tuple[Job, JobControl]], list[Outcome], list[Job]]:
    """What the store said of a call's jobs just before the call (`beat`: a heartbeat of
    them; `paused`: the paused queues): the jobs the function still gets; the outcomes of
    those it must not run (a paused queue's job goes back un-run, its attempt not
    counted, as if never claimed; a cancelled one ends cancelled; one whose expiry passed
    by `wall`, expired); and the jobs whose lease was lost (someone else's now)."""
    kept: list[tuple[Job, JobControl]] = []
    out: list[Outcome] = []
    lost: list[Job] = []
    for job, control in call.members:
        if job.id in beat:
            lost.append(job)
        elif job.id in beat.cancel_requested or control.cancelled:
            out.append(stopped(job))
        elif _expired(job, wall):
            out.append(Outcome(job, OutcomeKind.CANCELLED, error="expired"))
        elif job.queue in paused:
            out.append(Outcome(job, OutcomeKind.RELEASE))
        else:
            kept.append((job, control))
    return kept, out, lost


def _expired(job: Job, wall: float) -> bool:
    return job.expires_at is not None and job.expires_at <= wall
