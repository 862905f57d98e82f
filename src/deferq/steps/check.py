"""`deferq steps check` and `app.steps_check()`: would the code loaded now end any stored
durable job dead, or lose the work it recorded? (docs/steps.md, "Safe deploys").

Each unfinished or dead job that has checkpoints is replayed: its task function is
called with its arguments, under a `current_job()` whose steps, sleeps and waits answer
from the job's records and never from the store or a step's function. A recorded step
returns its kept result; the first point the job has not recorded (a new step, a sleep
not over, a wait not answered) ends the replay there, as the job's next run would go
on from there. What each checkpoint reached is checked against its record, as a run
checks it (name, kind, function, order), and what is left over is named:

- `reordered`: a recorded checkpoint is reached at another place in the order;
- `kind changed`: a step became a sleep or a wait (or the other way);
- `function changed`: a step now calls another function under the same name;
- `reached twice`: two checkpoints of one run share a name;
- `renamed`: the code reaches an unrecorded name where the job recorded another one
  (a rename, or a checkpoint inserted without `job.patched`);
- `removed`: the task returns without reaching checkpoints the job recorded.

Its limits: the task's own code between steps runs (as it does on every resume), so it
must not act on the world outside steps; a task that raises before the end of its
records is listed as not checked, with the error.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from ..attempt.runner import _call
from ..backends.base import Backend
from ..context import JobControl, RunningJob, StepRetry, running_job
from ..errors import DeferqError
from ..job import Job, JobState, loads
from ..registry import TaskSpec
from .checkpoints import DONE, KINDS, STEPS, checked_name, function_name
from .children import CHILD, STORED
from .children import KIND as CHILDREN
from .patches import PATCH, ran_past

CHECKED_STATES = (JobState.SCHEDULED, JobState.QUEUED, JobState.ACTIVE, JobState.DEAD)
READ_BATCH = 500  # jobs whose checkpoints are read in one store call


class StopReplay(BaseException):  # noqa: N818 - a signal, not an error: `except Exception` lets it by
    """The replay reached a point the job has not recorded: it ends there."""

    def __init__(self, name: str | None = None, kind: str | None = None, index: int = 0) -> None:
        super().__init__(name)
        self.name, self.kind, self.index = name, kind, index


class Mismatch(BaseException):  # noqa: N818 - a finding, raised past the task's own handlers
    def __init__(self, reason: str, step: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.step, self.detail = reason, step, detail


@dataclass(frozen=True)
class Finding:
    """A job the code loaded now would end dead or replay wrongly (`problem`: the
    reason), or could not replay (`problem` "not checked")."""

    job_id: str
    task: str
    state: str
    problem: str
    step: str | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Report:
    checked: int  # durable jobs replayed
    findings: list[Finding]
    seconds: float

    @property
    def failing(self) -> list[Finding]:
        return [f for f in self.findings if f.problem != "not checked"]

    def to_dict(self) -> dict[str, Any]:
        return {"checked": self.checked, "seconds": round(self.seconds, 3),
                "findings": [f.to_dict() for f in self.findings]}


class Replay:
    """The checkpoints of one job as a replay sees them (`context.Checkpoints`): every
    answer comes from `records`; nothing is written, no step's function is called."""

    def __init__(self, records: dict[str, dict[str, Any]]) -> None:
        self.records = records
        self.reached: dict[str, int] = {}
        self.patches: dict[str, bool] = {}
        self.last = max((r["index"] for r in records.values() if r.get("kind") in KINDS), default=-1)

    def reach(self, name: str, kind: str, fn: Callable[..., Any] | None = None) -> dict[str, Any]:
        checked_name(name)
        if name in self.reached:
            raise Mismatch("reached twice", name, f"{name!r} is reached twice in one run")
        index = self.reached[name] = len(self.reached)
        record = self.records.get(name)
        if record is None or record.get("kind") not in KINDS:
            raise StopReplay(name, kind, index)
        if record["kind"] != kind:
            raise Mismatch("kind changed", name, f"{name!r} was a {record['kind']} and is a {kind} now")
        if fn is not None and record.get("fn") != function_name(fn):
            raise Mismatch("function changed", name,
                           f"step {name!r} ran {record.get('fn')} and now calls {function_name(fn)}")
        if record["index"] != index:
            raise Mismatch("reordered", name,
                           f"{name!r} was checkpoint {record['index'] + 1} and is checkpoint {index + 1} now")
        return record

    def start(self, name: str, fn: Callable[..., Any]) -> dict[str, Any] | None:
        return self.reach(name, "step", fn)

    def now(self) -> float:
        return time.time()

    def kept(self, name: str, fn: Callable[..., Any], result: Any, started: float) -> Any:
        raise StopReplay(name, "step", len(self.reached))  # (start never lets a step run)

    def step(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
             retry: StepRetry | None = None) -> Any:
        return self.reach(name, "step", fn)["result"]

    def step_with_undo(self, name: str, undo: Callable[[Any], Any], fn: Callable[..., Any],
                       args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.step(name, fn, args, kwargs)

    def kept_with_undo(self, name: str, fn: Callable[..., Any], undo: Callable[[Any], Any], result: Any,
                       started: float) -> Any:
        raise StopReplay(name, "step", len(self.reached))

    def undo_on(self, name: str, undo: Callable[[Any], Any]) -> None:
        return None

    def failed(self, name: str, retry: StepRetry | None, exc: Exception) -> None:
        return None

    def step_within(self, connection: Any, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> Any:
        return self.step(name, fn, args, kwargs)

    def sleep(self, name: str, delay: float | None = None, until: float | None = None) -> None:
        record = self.reach(name, "sleep")
        if record["index"] >= self.last:  # nothing recorded after it: the job sleeps here
            raise StopReplay()

    def wait_for(self, name: str, event: str, key: str, timeout: float) -> Any:
        self.reach(name, "wait")
        answer = self.records.get(name + DONE)
        if answer is None:  # the job waits here
            raise StopReplay()
        return answer.get("data")

    def gather(self, name: str, calls: list[Any]) -> list[Any]:
        record = self.reach(name, CHILDREN)
        if len(record["ids"]) != len(calls):
            raise Mismatch("function changed", name, f"{name!r} started {len(record['ids'])} child jobs "
                           f"and is given {len(calls)} now")
        ids = (self.records.get(name + STORED) or {}).get("ids") or record["ids"]
        ends = [self.records.get(f"{name}{CHILD}{child_id}") for child_id in ids]
        if None in ends or any(end["state"] != "succeeded" for end in ends if end):  # it waits or fails here
            raise StopReplay()
        return [end["result"] for end in ends if end]

    def patched(self, name: str) -> bool:
        checked_name(name, "a patch name")
        if name not in self.patches:
            self.patches[name] = name + PATCH in self.records or not ran_past(self.records, len(self.reached))
        return self.patches[name]

    def ended(self, outcome: Any) -> Any:
        return outcome

    def left_over(self, stop: StopReplay | None) -> Finding | None:
        """What the code no longer reaches of the job's records, once the replay ended
        (at `stop`, an unrecorded point, or at the task's end: None)."""
        position = len(self.reached) if stop is None or stop.name is None else stop.index
        unreached = sorted((r["index"], n, r["kind"]) for n, r in self.records.items()
                           if r.get("kind") in KINDS and n not in self.reached and r["index"] >= position)
        if not unreached:
            return None
        index, old, kind = unreached[0]
        if stop is not None and stop.name is not None and index == stop.index:
            return Finding("", "", "", "renamed", old,
                           f"the job recorded {kind} {old!r} as checkpoint {index + 1}, where the code now "
                           f"reaches {stop.kind} {stop.name!r} (renamed, or inserted without job.patched)")
        names = ", ".join(repr(n) for _, n, _ in unreached)
        return Finding("", "", "", "removed", old, f"the code no longer reaches what the job recorded: {names}")


class Code:
    """The code a check replays jobs against: each job's task (`spec_for`, the App's
    registry), and a job as its task is called (`with_inputs`: a workflow step's parents'
    results in front of its arguments)."""

    def __init__(self, spec_for: Callable[[Job], TaskSpec], with_inputs: Callable[[Job], Job]) -> None:
        self.spec_for, self.with_inputs = spec_for, with_inputs


def replay(code: Code, job: Job, records: dict[str, dict[str, Any]],
           loop: asyncio.AbstractEventLoop) -> Finding | None:
    """Replay one job (see the module's doc); its finding, or None if the code fits."""
    spec = code.spec_for(job)
    state = str(job.state)

    def found(problem: str, step: str | None, detail: str) -> Finding:
        return Finding(job.id, job.task, state, problem, step, detail)

    if spec.fn is None:
        return found("removed", None, f"the code loaded has no task {job.task!r}")
    steps = Replay(records)
    control = JobControl(steps_for=lambda _: steps)
    token = running_job.set(RunningJob(job, control))
    stop: StopReplay | None = None
    try:
        called = _call(spec, code.with_inputs(job) if job.meta else job)
        if inspect.isawaitable(called):
            loop.run_until_complete(called)
    except StopReplay as reached:
        stop = reached
    except Mismatch as mismatch:
        return found(mismatch.reason, mismatch.step, mismatch.detail)
    except (Exception, asyncio.CancelledError) as exc:  # the task's own error, under the code loaded now
        detail = f"{type(exc).__name__}: {exc}"[:500]
        return found("not checked", None, f"the task raised {detail} while replayed")
    finally:
        running_job.reset(token)
    left = steps.left_over(stop)
    return None if left is None else found(left.problem, left.step, left.detail)


def durable_jobs(store: Backend) -> Iterator[tuple[Job, dict[str, dict[str, Any]]]]:
    """Every unfinished or dead job that has checkpoints, with them (one read a batch)."""
    counts: dict[str, int] = {}
    for per_queue in store.stats().values():
        for state, count in per_queue.counts.items():
            counts[state] = counts.get(state, 0) + count
    for state in CHECKED_STATES:
        total = counts.get(str(state), 0)
        if not total:
            continue
        jobs = store.list_jobs(state, None, total + 100)  # (+ what came since the count)
        for first in range(0, len(jobs), READ_BATCH):
            batch = jobs[first:first + READ_BATCH]
            found = store.kv_list_many([STEPS + job.id for job in batch])
            for job in batch:
                raw = found.get(STEPS + job.id)
                if raw:
                    yield job, {name: loads(value) for name, value in raw.items()}


def steps_check(store: Backend, code: Code,
                jobs: Iterable[tuple[Job, dict[str, dict[str, Any]]]] | None = None) -> Report:
    """Replay every unfinished or dead durable job of `store` against `code` (`jobs`:
    those instead); see the module's doc."""
    started, checked, findings = time.perf_counter(), 0, []
    loop = asyncio.new_event_loop()
    try:
        for job, records in durable_jobs(store) if jobs is None else jobs:
            checked += 1
            try:
                finding = replay(code, job, records, loop)
            except DeferqError as exc:
                finding = Finding(job.id, job.task, str(job.state), "not checked", None, str(exc)[:500])
            if finding is not None:
                findings.append(finding)
    finally:
        loop.close()
    return Report(checked, findings, time.perf_counter() - started)


__all__ = ["Code", "Finding", "Report", "steps_check"]
