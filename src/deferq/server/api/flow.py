"""GET /v1/jobs/{id}/flow: the whole workflow a job belongs to — a chain, a chord, a group,
a batch and its callbacks — as a graph: every job with its state, and the edges "runs
after". Found from the job by following its links both ways: the jobs it runs after
(`deferq.after`), the jobs enqueued to run after it (`deferq.children`), those still
waiting for it (`dependents`), and its batch's members and callbacks.

At most MAX_NODES jobs are answered (`truncated` says when more exist); each round of the
walk reads its new jobs with one `get_many`. A job that was purged is a node with state
null."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from msgspec import Struct
from starlette.routing import Route

from ...backends.base import Backend
from ...flows import batch as batches
from ...flows.batch import BATCH_OF, MEMBER_OF
from ...job import Job
from ...task import AFTER, CHILDREN
from ..http.errors import not_found
from ..process.web import JSON
from ..topics.delivery import TASK_NAME
from .openapi import answer, operation, path_param, ref
from .routes import READER, Handler, by_method, store_route

if TYPE_CHECKING:
    from ..process.service import Service

PATH = "/v1/jobs/{job_id}/flow"
MAX_NODES = 2000


class FlowNode(Struct):
    id: str
    state: str | None  # null: purged
    task: str | None  # a topic job: its topic
    queue: str | None
    batch: str | None  # the batch it is a member or a callback of


class Flow(Struct):
    job: str  # the job asked about
    nodes: list[FlowNode]
    edges: list[list[str]]  # [a, b]: b runs after a
    truncated: bool


def _name(job: Job) -> str:
    return str(job.args[0]) if job.task == TASK_NAME and job.args else job.task


class _Walk:
    def __init__(self, store: Backend) -> None:
        self.store = store
        self.nodes: dict[str, dict[str, Any]] = {}
        self.edges: set[tuple[str, str]] = set()
        self.batches: dict[str, dict[str, Any] | None] = {}

    def batch(self, batch_id: str) -> dict[str, Any]:
        if batch_id not in self.batches:
            self.batches[batch_id] = batches.record_of(self.store, batch_id)
        return self.batches[batch_id] or {"members": [], "callbacks": {}}

    def links(self, job: Job) -> list[str]:
        """The ids next to `job`, its edges noted."""
        parents = list(job.meta.get(AFTER, ()))
        children = [*job.meta.get(CHILDREN, ()), *self.store.dependents(job.id)]
        if (member_of := job.meta.get(MEMBER_OF)) is not None:
            children += self.batch(member_of)["callbacks"].values()
        if (callback_of := job.meta.get(BATCH_OF)) is not None:
            parents += self.batch(callback_of)["members"]
        self.edges.update((parent, job.id) for parent in parents)
        self.edges.update((job.id, child) for child in children)
        return [*parents, *children]

    def add(self, job_id: str, job: Job | None) -> None:
        self.nodes[job_id] = {
            "id": job_id, "state": str(job.state) if job else None, "task": _name(job) if job else None,
            "queue": job.queue if job else None,
            "batch": (job.meta.get(MEMBER_OF) or job.meta.get(BATCH_OF)) if job else None}


def flow(store: Backend, job_id: str) -> dict[str, Any] | None:
    """The graph of the workflow `job_id` belongs to (see the module's text); None: no such job."""
    first = store.get(job_id)
    if first is None:
        return None
    walk = _Walk(store)
    walk.add(job_id, first)
    frontier: list[Job] = [first]
    truncated = False
    while frontier:
        found: dict[str, None] = {}
        for job in frontier:
            found.update(dict.fromkeys(i for i in walk.links(job) if i not in walk.nodes))
        new = list(found)
        room = MAX_NODES - len(walk.nodes)
        if len(new) > room:
            new, truncated = new[:room], True
        frontier = []
        for other_id, other in zip(new, store.get_many(new), strict=True):
            walk.add(other_id, other)
            if other is not None:
                frontier.append(other)
    edges = sorted([a, b] for a, b in walk.edges if a in walk.nodes and b in walk.nodes)
    return {"job": job_id, "nodes": list(walk.nodes.values()), "edges": edges, "truncated": truncated}


@store_route(READER)
async def job_flow(service: Service, job_id: str) -> JSON:
    graph = await service.store(flow, service.backend, job_id)
    if graph is None:
        raise not_found(f"job {job_id}")
    return JSON(graph)


ROUTES: dict[str, dict[str, Handler]] = {PATH: {"GET": job_flow}}
MODELS = (FlowNode, Flow)


def routes() -> list[Route]:
    return [Route(path, by_method(handlers, paths), methods=list(handlers)) for path, handlers in ROUTES.items()]


def paths() -> dict[str, Any]:
    return {
        PATH: {"get": operation(
            "The whole workflow a job belongs to (chain, chord, group, batch): every job with its state, "
            "and the edges `b runs after a`", "reader", {"200": answer("The graph", ref("Flow"))},
            params=[path_param("job_id")], errors=("404", "503"))},
    }
