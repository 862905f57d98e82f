"""Running one call of a chunk task: many leased jobs, one call of the function, an
outcome per job (chunks.py says what the call's end means for each).

Each job goes through the chain's before_run on its own, so a limit holds items, not
calls (a job a rate puts back is left out of the list); its after_run sees its own
outcome. Those hooks see the job as `current_job()`; the call itself has no one job, so
there it is None. A job cancelled while the call ran ends cancelled, whatever the call did.
"""

from __future__ import annotations

import time
from typing import Any

from ..backends.base import Outcome
from ..chunks import endings
from ..context import JobControl, RunningJob, running_job
from ..errors import PayloadError
from ..job import Job
from ..middleware import Chain
from ..registry import TaskSpec
from .pauses import ARMED, pause_at
from .runner import arguments, decide_failure, stopped, succeeded

Ran = tuple[Outcome, "BaseException | None"]


def run_chunk(spec: TaskSpec, jobs: list[tuple[Job, JobControl]], chain: Chain) -> list[Ran]:
    """Call a chunk task's function once with the items of `jobs` (here, a runner
    thread), and return each job's outcome, in order."""
    ran: list[Ran | None] = [None] * len(jobs)
    taken: list[int] = []  # positions in `jobs` of the items the function gets
    items: list[Any] = []
    for at, (job, control) in enumerate(jobs):
        token = running_job.set(RunningJob(job, control))  # a limit's slot goes on the job's control
        try:
            chain.run_before_run(job)
            items.append(_item(spec, job))
            taken.append(at)
        except BaseException as error:  # noqa: BLE001 - every failure becomes an outcome
            if isinstance(error, KeyboardInterrupt | SystemExit):
                raise
            ran[at] = decide_failure(spec, job, error), error
        finally:
            running_job.reset(token)
    if taken:
        if ARMED:  # a freeze-and-kill test's point (pauses.py)
            pause_at("chunk.call")
        started = time.perf_counter()
        result, exc = _call(spec, items)
        if chain.after_chunk:
            chain.run_after_chunk([jobs[at][0] for at in taken], time.perf_counter() - started)
        for at, ending in zip(taken, endings(len(taken), result, exc, spec.name), strict=True):
            job = jobs[at][0]
            if ending.error is None:
                ran[at] = succeeded(job, ending.result), None
            else:
                ran[at] = decide_failure(spec, job, ending.error), ending.error
    out: list[Ran] = []
    for (job, control), done in zip(jobs, ran, strict=True):
        assert done is not None
        outcome, raised = done
        if control.cancelled:  # asked to stop: whatever the call did, this job stopped
            outcome = stopped(job)
        token = running_job.set(RunningJob(job, control))
        try:
            chain.run_after_run(job, outcome, raised)
        finally:
            running_job.reset(token)
        out.append((outcome, raised))
    return out


def _item(spec: TaskSpec, job: Job) -> Any:
    """The job's one argument, decoded to the list's item type."""
    args, kwargs = arguments(spec, job)
    if len(args) != 1 or kwargs:
        raise PayloadError(f"a job of chunk task {job.task}() must hold one item, it holds "
                          f"{len(args)} argument(s) and {len(kwargs)} keyword argument(s)")
    return args[0]


def _call(spec: TaskSpec, items: list[Any]) -> tuple[Any, BaseException | None]:
    assert spec.fn is not None
    try:
        return spec.fn(items), None
    except BaseException as error:  # noqa: BLE001 - every failure becomes an outcome
        if isinstance(error, KeyboardInterrupt | SystemExit):
            raise
        return None, error
