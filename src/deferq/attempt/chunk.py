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
from collections.abc import Callable
from dataclasses import replace
from operator import attrgetter, itemgetter
from typing import Any

from ..backends.base import Outcome, OutcomeKind, make_outcome
from ..chunks import endings
from ..context import JobControl, RunningJob, running_job
from ..errors import JobTimeout, PayloadError
from ..job import Job, copier, new_job_id
from ..middleware import Chain
from ..registry import TaskSpec
from .pauses import ARMED, pause_at
from .runner import arguments, decide_failure, stopped, succeeded

Ran = tuple[Outcome, "BaseException | None"]
SUCCEEDED = OutcomeKind.SUCCEEDED
_with_job: Callable[[Outcome, Job], Outcome] = copier(Outcome, "job", checked=False)
# what a call reads of each of its jobs, each in one C call over the call
_FIRST, _CONTROL, _ONE = itemgetter(0), itemgetter(1), {1}
_ARGS, _KWARGS, _CANCELLED = attrgetter("args"), attrgetter("kwargs"), attrgetter("cancelled")


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
        self.all_succeeded = False  # every job's outcome is the call's success, as made (ended)
        hooks = chain.before_run  # read once: `changed` replaces the list whole
        stored = _as_stored(jobs) if not hooks and spec.fn is not None and spec.decode is None else None
        if stored is not None:  # no hook to run, nothing to decode or refuse: the items as stored
            self.items, self.taken = stored, list(range(len(jobs)))
        else:
            self._take_each(hooks)
        if self.items and ARMED:  # a freeze-and-kill test's point (pauses.py)
            pause_at("chunk.call")

    def _take_each(self, hooks: list[Callable[[Job], None]]) -> None:
        """Each job through the before_run hooks, and its item decoded: those that pass
        give their item, the others their outcome."""
        for at, (job, control) in enumerate(self.jobs):
            # the job as current_job() for its hooks (a limit's slot goes on its control);
            # with none, nothing reads it: no RunningJob made, no context var set
            token = running_job.set(RunningJob(job, control)) if hooks else None
            try:
                if hooks:
                    self.chain.run_before_run(job)
                self.items.append(_item(self.spec, job))
                self.taken.append(at)
            except BaseException as error:  # noqa: BLE001 - every failure becomes an outcome
                if isinstance(error, KeyboardInterrupt | SystemExit):
                    raise
                self.ran[at] = decide_failure(self.spec, job, error), error
            finally:
                if token is not None:
                    running_job.reset(token)

    def ended(self, result: Any, exc: BaseException | None, started: float) -> None:
        if self.chain.after_chunk:
            self.chain.run_after_chunk([self.jobs[at][0] for at in self.taken], time.perf_counter() - started)
        jobs, ran, call = self.jobs, self.ran, self.id
        if exc is None and result is None:  # the commonest end: every job succeeded, with no result
            # one outcome made (and checked), each job's a copy of it with its own job
            made = make_outcome(jobs[self.taken[0]][0], SUCCEEDED, 0.0, None, None, None, None, None, None, call)
            for at in self.taken:
                ran[at] = _with_job(made, jobs[at][0]), None
            self.all_succeeded = len(self.taken) == len(jobs)
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
        call, chain = self.id, self.chain
        after_run, after_raised = chain.after_run, chain.after_raised  # read once, as `changed` replaces them
        if self.all_succeeded and not after_run and not any(map(_CANCELLED, map(_CONTROL, self.jobs))):
            return self.ran  # type: ignore[return-value]  # every one set, as made
        out: list[Ran] = []
        taken: set[int] | None = None
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


def _as_stored(jobs: list[tuple[Job, JobControl]]) -> list[Any] | None:
    """The items of `jobs` as stored, when each holds one argument and no keyword (read
    in C over the call's jobs); None when one does not (each is then read on its own)."""
    args = list(map(_ARGS, map(_FIRST, jobs)))
    if set(map(len, args)) != _ONE or any(map(_KWARGS, map(_FIRST, jobs))):
        return None
    return list(map(_FIRST, args))


def _item(spec: TaskSpec, job: Job) -> Any:
    """The job's one argument, decoded to the list's item type."""
    args = job.args
    if len(args) == 1 and not job.kwargs and spec.decode is None and spec.fn is not None:
        return args[0]  # an item of a JSON type, as stored: nothing to decode, nothing to refuse
    args, kwargs = arguments(spec, job)
    if len(args) != 1 or kwargs:
        raise PayloadError(f"a job of chunk task {job.task}() must hold one item, it holds "
                          f"{len(args)} argument(s) and {len(kwargs)} keyword argument(s)")
    return args[0]
