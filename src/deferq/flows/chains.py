"""Chains, groups and chords: workflows of ordinary durable jobs, linked by `after`.

`chain(a.call(1), b.call(), c.call())` stores three jobs at once, b after a and c after
b; `group(...)` stores jobs that run side by side; `chord(group, callback)` stores the
callback after every member. Each step is an ordinary job, blocked in the store until
its parents succeed (backends/deps.py), so a workflow survives any crash that a job
survives. The whole workflow is one `enqueue_many`: one transaction, all or nothing.

Results travel by reference: a job that takes its parents' results names them in its
meta (RESULTS_OF), and the worker reads them from the store just before it runs the job
(`Inputs`, a plug-in every App installs: `with_inputs`), as the first argument: one value
after a job, a list after a group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload

from .. import results
from ..backends.base import Enqueue, JobAdmin
from ..errors import ConfigError, JobFailed
from ..job import FINISHED_STATES, Job, JobState, carried, carry
from ..middleware import Middleware
from ..task import CHILDREN, SHOWN_CHILDREN, AppLike, Call, build_enqueue, linked, with_meta
from .batch import BATCH_OF, summary

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Step(Protocol[T_co]):
    """A workflow step as a type checker sees it: a `Call[T]` gives T, a `Group[T]` a
    list[T]; a chain's handle is typed by its last step's."""

    @property
    def _result(self) -> T_co: ...


RESULTS_OF = "deferq.results_of"  # meta: ids whose results come first in the arguments
RESULTS_AS = "deferq.results_as"  # meta: "one" (a job's result) or "list" (a group's, in order)


@dataclass(frozen=True)
class Group(Generic[T_co]):
    """Calls that run side by side; its result is the list of theirs, in order."""

    calls: tuple[Call[T_co], ...]

    if TYPE_CHECKING:
        @property
        def _result(self) -> list[T_co]: ...

    def enqueue(self, app: AppLike[object] | None = None) -> Handle[list[T_co]]:
        return chain(self).enqueue(app)

    async def enqueue_async(self, app: AppLike[object] | None = None) -> Handle[list[T_co]]:
        return await chain(self).enqueue_async(app)


@dataclass(frozen=True)
class Chain(Generic[T_co]):
    """Steps (calls or groups) that run one after another; with `pass_result`, each
    step's result is the first argument of the next. `T_co`: the last step's result."""

    steps: tuple[Call[Any] | Group[Any], ...]
    pass_result: bool = True

    def plan(self, app: AppLike[object]) -> tuple[list[Enqueue], list[int], bool]:
        """(the jobs to store, the positions of the ones whose result is the workflow's,
        whether that result is a list)."""
        items: list[Enqueue] = []
        previous: list[str] = []
        last: list[int] = []
        as_list = False
        for step in self.steps:
            calls = step.calls if isinstance(step, Group) else (step,)
            before, last = last, []
            for call in calls:
                item = _stored_form(app, call, previous, as_list if self.pass_result else None)
                last.append(len(items))
                items.append(item)
            children = [items[i].job.id for i in last][:SHOWN_CHILDREN]
            for i in before:  # each job of the step before names this step's (the job page)
                items[i] = with_meta(items[i], **{CHILDREN: children})
            previous, as_list = [items[i].job.id for i in last], isinstance(step, Group)
        return items, last, as_list

    def enqueue(self, app: AppLike[object] | None = None) -> Handle[T_co]:
        app = app or app_of(self.steps)
        items, last, as_list = self.plan(app)
        refuse_held_keys(app.backend, items)
        jobs = app.runtime.enqueue_items(items)
        return Handle(app, [j.id for j in jobs], [jobs[i].id for i in last], as_list)

    async def enqueue_async(self, app: AppLike[object] | None = None) -> Handle[T_co]:
        app = app or app_of(self.steps)
        items, last, as_list = self.plan(app)
        await asyncio.to_thread(refuse_held_keys, app.backend, items)
        jobs = await app.runtime.enqueue_items_async(items)
        return Handle(app, [j.id for j in jobs], [jobs[i].id for i in last], as_list)


# A chain is typed by its last step (up to six steps; longer ones are Chain[Any]).
@overload
def chain(s1: Step[T], /, *, pass_result: bool = True) -> Chain[T]: ...
@overload
def chain(s1: Step[Any], s2: Step[T], /, *, pass_result: bool = True) -> Chain[T]: ...
@overload
def chain(s1: Step[Any], s2: Step[Any], s3: Step[T], /, *, pass_result: bool = True) -> Chain[T]: ...
@overload
def chain(s1: Step[Any], s2: Step[Any], s3: Step[Any], s4: Step[T], /, *,
          pass_result: bool = True) -> Chain[T]: ...
@overload
def chain(s1: Step[Any], s2: Step[Any], s3: Step[Any], s4: Step[Any], s5: Step[T], /, *,
          pass_result: bool = True) -> Chain[T]: ...
@overload
def chain(s1: Step[Any], s2: Step[Any], s3: Step[Any], s4: Step[Any], s5: Step[Any], s6: Step[T], /, *,
          pass_result: bool = True) -> Chain[T]: ...
@overload
def chain(*steps: Step[Any], pass_result: bool = True) -> Chain[Any]: ...


def chain(*steps: Any, pass_result: bool = True) -> Chain[Any]:
    """Run steps one after another; each step's result is the next one's first argument
    (unless `pass_result=False`). A step may be a group: the next step then gets the
    list of its members' results."""
    if not steps:
        raise ConfigError("a chain needs at least one step")
    for step in steps:
        if not isinstance(step, Call | Group):
            raise ConfigError(f"a chain's steps are task.call(...) values or groups, got {step!r:.60}")
    return Chain(tuple(steps), pass_result)


def group(*calls: Call[T] | Iterable[Call[T]]) -> Group[T]:
    """Run calls side by side: `group(a.call(1), a.call(2))` or `group(calls)`."""
    flat = tuple(c for item in calls for c in ((item,) if isinstance(item, Call) else item))
    if not flat:
        raise ConfigError("a group needs at least one call")
    if not all(isinstance(c, Call) for c in flat):
        raise ConfigError("a group's members are task.call(...) values")
    return Group(flat)


def chord(members: Group[Any] | Iterable[Call[Any]], callback: Call[T]) -> Chain[T]:
    """Run `callback` with the list of the members' results, once all have succeeded."""
    return chain(members if isinstance(members, Group) else group(members), callback)


class Handle(Generic[T_co]):
    """A stored workflow: `id` (the job whose result is the workflow's: the last step,
    or a group's first member), `state`, `wait()`, `wait_async()`, `cancel()`."""

    def __init__(self, app: AppLike[object], ids: list[str], result_ids: list[str], as_list: bool) -> None:
        self.app, self.ids, self.result_ids, self.as_list = app, ids, result_ids, as_list
        self.id = result_ids[0] if as_list else result_ids[-1]

    def __repr__(self) -> str:
        return f"<deferq workflow {self.id} of {len(self.ids)} jobs>"

    @property
    def state(self) -> JobState:
        """The result jobs' state: succeeded when all did; else the first unfinished or
        failed one's."""
        states = [job.state if (job := self.app.get(i)) else JobState.CANCELLED for i in self.result_ids]
        return next((s for s in states if s != JobState.SUCCEEDED), JobState.SUCCEEDED)

    def wait(self, timeout: float | None = None) -> T_co:
        """The workflow's result (a list for a group); JobFailed names the job that
        failed first (not the steps cancelled after it)."""
        try:
            values = [results.wait(self.app, i, timeout) for i in self.result_ids]
        except JobFailed as failed:
            raise self._first_failure() or failed from None
        return values if self.as_list else values[0]  # type: ignore[return-value]  # T_co: list or one

    async def wait_async(self, timeout: float | None = None) -> T_co:
        return await asyncio.to_thread(self.wait, timeout)

    def cancel(self) -> int:
        """Cancel every unfinished job of the workflow; how many were."""
        return sum(self.app.cancel(i) for i in self.ids)

    def _first_failure(self) -> JobFailed | None:
        for job_id in self.ids:
            job = self.app.get(job_id)
            if job is not None and job.state == JobState.DEAD:
                return JobFailed(job, str(job.state), job.error)
        return None


def refuse_held_keys(store: JobAdmin, items: Sequence[Enqueue]) -> None:
    """A first step that later steps run after may not take a unique key an unfinished
    job holds: enqueueing it would return that job, and the steps after it would wait on
    a job the workflow never stored. Refused before anything is stored, on every store
    (docs/workflows.md). A step nothing runs after is deduplicated as usual."""
    parents = {parent for item in items for parent in item.after}
    for item in items:
        job = item.job
        if job.key is None or job.id not in parents:
            continue
        holder = store.get_by_key(job.key)
        if holder is None or holder.state in FINISHED_STATES:
            continue
        if store.keys_per_queue and holder.queue != job.queue:
            continue  # this store's keys are unique per queue: no conflict
        raise ConfigError(
            f"this workflow's {job.task} step has unique key {job.key!r}, which job {holder.id} "
            f"({holder.state}) holds: the steps after it would wait on a job the workflow does not "
            "store; run the workflow after that job, or give the step another key"
        )


def _stored_form(app: AppLike[object], call: Call, after: Sequence[str], results_as: bool | None) -> Enqueue:
    """A call as stored: after the previous step; naming its results when it takes them."""
    item = build_enqueue(call, app.tasks.get(call.task), 0.0, fair_queues=app.fair_queues)
    if not after:
        return item
    if results_as is None:
        return linked(item, after, False)
    return linked(item, after, False, **{RESULTS_OF: list(after), RESULTS_AS: "list" if results_as else "one"})


def app_of(steps: Sequence[Call[Any] | Group[Any]]) -> AppLike[object]:
    """The App of a workflow's first call (`task.call(...)` knows its task's App): the
    one it is stored in when `enqueue()` names none."""
    calls = [c for step in steps for c in (step.calls if isinstance(step, Group) else (step,))]
    if calls[0].source is None:
        raise ConfigError(f"the workflow's first call ({calls[0].task}) was not made by task.call(...), "
                          "so it names no App: pass one, chain(...).enqueue(app)")
    app = calls[0].source.app
    if any(c.source is not None and c.source.app is not app for c in calls):
        raise ConfigError("a workflow's calls come from tasks of different Apps: a workflow is stored "
                          "in one store; pass the App, chain(...).enqueue(app)")
    return app


def with_inputs(store: JobAdmin, job: Job) -> Job:
    """`job` with its parents' results in front of its arguments (RESULTS_OF), read from
    the store as the worker takes it (a parent gone, purged, gives None); a batch
    callback's summary as its keyword `batch`."""
    if BATCH_OF in job.meta:  # a batch's callback: its summary as the keyword `batch`
        job = job.evolve(kwargs={**job.kwargs, "batch": summary(store, job.meta[BATCH_OF])})
    ids = job.meta.get(RESULTS_OF)
    if not ids:
        return job
    found = store.get_many(ids)
    values = [p.result if p is not None and p.state in FINISHED_STATES else None for p in found]
    first = values if job.meta.get(RESULTS_AS) == "list" else values[0]
    return job.evolve(args=(first, *job.args))


class Inputs(Middleware):
    """A claimed workflow step gets its parents' results, a batch callback its summary
    (`with_inputs`), read from `store` (the App's); installed by every App. Only a job
    with meta is looked at (`claims`): a plain job's batch never enters it."""

    claims = attrgetter("meta")

    def __init__(self, store: Callable[[], JobAdmin]) -> None:
        self.store = store

    def after_claim(self, jobs: list[Job]) -> list[Job]:
        store = self.store()
        return [self.filled(store, job) if job.meta else job for job in jobs]

    @staticmethod
    def filled(store: JobAdmin, job: Job) -> Job:
        """`with_inputs`, the checkpoints its claim brought kept on the new job."""
        found = with_inputs(store, job)
        if found is not job and (checkpoints := carried(job)) is not None:
            carry(found, checkpoints)
        return found
