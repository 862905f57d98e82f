"""Running one call of a chunk task: many leased jobs, one call of the function, an
outcome per job (chunks.py says what the call's end means for each).

Each job goes through the chain's before_run on its own, so a limit holds items, not
calls (a job a rate puts back is left out of the list); its after_run sees its own
outcome. Those hooks see the job as `current_job()`; the call itself has no one job, so
there it is None. A job cancelled while the call ran ends cancelled, whatever the call did.

Each job the function was given settles with the call's id (`Outcome.chunk_call`, kept as
`Job.chunk_call`): a fresh id per call, made like a job id (so it sorts by time), never a
job's own id, since a job retried in a later call would then name two calls.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

from ..backends.base import Outcome, OutcomeKind, make_outcome
from ..chunks import endings
from ..context import JobControl, RunningJob, running_job
from ..errors import JobTimeout, PayloadError
from ..job import Job, new_job_id
from ..middleware import Chain
from ..registry import TaskSpec
from .pauses import ARMED, pause_at
from .runner import arguments, decide_failure, stopped, succeeded

Ran = tuple[Outcome, "BaseException | None"]
SUCCEEDED = OutcomeKind.SUCCEEDED


def run_chunk(spec: TaskSpec, jobs: list[tuple[Job, JobControl]], chain: Chain) -> list[Ran]:
    """Call a chunk task's function once with the items of `jobs` (here, a runner
    thread), and return each job's outcome, in order."""
    call = _Call(spec, jobs, chain)
    if call.items:
        started = time.perf_counter()
        try:
            call.ended(spec.fn(call.items), None, started)  # type: ignore[misc]  # _Call refused a missing fn
        except BaseException as error:  # noqa: BLE001 - every failure becomes an outcome
            if isinstance(error, KeyboardInterrupt | SystemExit):
                raise
            call.ended(None, error, started)
    return call.outcomes()


async def run_chunk_async(spec: TaskSpec, jobs: list[tuple[Job, JobControl]], chain: Chain,
                          timeout: float | None = None) -> list[Ran]:
    """The same for an async chunk task, on the worker's event loop, cancelled at
    `timeout` (every job of the call then fails with a timeout). A job cancelled meanwhile
    does not stop the call: it ends cancelled."""
    call = _Call(spec, jobs, chain)
    if call.items:
        started = time.perf_counter()
        try:
            try:
                result = await asyncio.wait_for(spec.fn(call.items), timeout)  # type: ignore[misc]
            except TimeoutError:
                raise JobTimeout(f"timed out after {timeout:g}s") from None
            call.ended(result, None, started)
        except Exception as error:  # noqa: BLE001 - every failure becomes an outcome
            call.ended(None, error, started)
    return call.outcomes()


class _Call:
    """One call's jobs: each through before_run (those that pass give their item), then
    the call's end mapped to each job, and each through after_run. `id`: the call's,
    given to the outcome of each job the function was given."""

    def __init__(self, spec: TaskSpec, jobs: list[tuple[Job, JobControl]], chain: Chain) -> None:
        self.spec, self.jobs, self.chain = spec, jobs, chain
        self.ran: list[Ran | None] = [None] * len(jobs)
        self.taken: list[int] = []  # positions in `jobs` of the items the function gets
        self.id = new_job_id()
        self.items: list[Any] = []
        hooks = chain.before_run  # read once: `changed` replaces the list whole
        for at, (job, control) in enumerate(jobs):
            # the job as current_job() for its hooks (a limit's slot goes on its control);
            # with none, nothing reads it: no RunningJob made, no context var set
            token = running_job.set(RunningJob(job, control)) if hooks else None
            try:
                if hooks:
                    chain.run_before_run(job)
                self.items.append(_item(spec, job))
                self.taken.append(at)
            except BaseException as error:  # noqa: BLE001 - every failure becomes an outcome
                if isinstance(error, KeyboardInterrupt | SystemExit):
                    raise
                self.ran[at] = decide_failure(spec, job, error), error
            finally:
                if token is not None:
                    running_job.reset(token)
        if self.items and ARMED:  # a freeze-and-kill test's point (pauses.py)
            pause_at("chunk.call")

    def ended(self, result: Any, exc: BaseException | None, started: float) -> None:
        if self.chain.after_chunk:
            self.chain.run_after_chunk([self.jobs[at][0] for at in self.taken], time.perf_counter() - started)
        jobs, ran, call = self.jobs, self.ran, self.id
        if exc is None and result is None:  # the commonest end: every job succeeded, with no result
            for at in self.taken:
                ran[at] = make_outcome(jobs[at][0], SUCCEEDED, 0.0, None, None, None, None, None, None, call), None
            return
        for at, ending in zip(self.taken, endings(len(self.taken), result, exc, self.spec.name), strict=True):
            job = jobs[at][0]
            if ending.error is None:
                ran[at] = succeeded(job, ending.result, call), None  # made with the call's id: no copy
            else:
                ran[at] = decide_failure(self.spec, job, ending.error), ending.error

    def outcomes(self) -> list[Ran]:
        """Each job's outcome, through its after_run hooks (none registered: no
        RunningJob, no context var set). One that failed, or was stopped, gets the
        call's id here (a copy): those that succeeded were made with it."""
        out: list[Ran] = []
        taken: set[int] | None = None
        call, chain = self.id, self.chain
        after_run, after_raised = chain.after_run, chain.after_raised  # read once, as `changed` replaces them
        for at, ((job, control), done) in enumerate(zip(self.jobs, self.ran, strict=True)):
            assert done is not None
            outcome, raised = done
            if control.cancelled:  # asked to stop: whatever the call did, this job stopped
                outcome = stopped(job)
            if outcome.chunk_call != call:
                taken = set(self.taken) if taken is None else taken
                if at in taken:  # failed or stopped: a copy with the id
                    outcome = replace(outcome, chunk_call=call)
            hooks = after_run if raised is None else after_raised
            if hooks:
                token = running_job.set(RunningJob(job, control))
                try:
                    chain.run_after(hooks, job, outcome, raised)
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
