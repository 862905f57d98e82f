"""Dependencies on Redis (backends/deps.py states the rules): jobs stored blocked, linked
to the jobs they run after, released when those finish.

A job and the jobs it runs after may sit in different slots (Cluster) or on different
servers (shards), so no script sees both ends of an edge. Each end is kept in its own
job's slot, and every step is one script in one slot (keys.py has the layout):

- the child, stored BLOCKED by enqueue.lua, holds the set of its unfinished parents;
- each parent holds the set of its children (link.lua), and a `c` in its `notify`
  field, which the scripts finishing it read in the same HMGET as the lease fence: a
  parent with children is marked in its queue's `released` zset atomically with its
  finish;
- the backend that finished it then releases each child in the child's slot
  (release.lua: SREM from the child's parents set, so each edge is taken away exactly
  once whoever gets there first), then unmarks the parent (released.lua);
- a backend that dies in between leaves the mark: the sweep (recover_expired) takes
  marks older than a few seconds and does the same;
- a producer that dies between storing children and linking them (Cluster, shards: no
  transaction spans the slots) leaves them in their queue's `linking` set, and the
  sweep links them (`relink_due`).

`homes(job_id)` names the backends that may hold a job: the backend itself, or on
shards the server its id is marked for (every server for an id that is not marked).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from ...errors import StoreUnavailable
from ...job import FINISHED_STATES, Job, JobState
from .. import deps
from ..base import Enqueue
from . import scripts
from .keys import KeySpace
from .scripts import Call


class Store(Protocol):
    """What this module needs of a Redis backend (backend.py), one server's worth."""

    keys: KeySpace
    transactions: bool  # whether one MULTI/EXEC may span its queues (not on a Cluster)

    def enqueue_plan(self, items: Sequence[Enqueue]) -> Any: ...
    def register_queues(self, queues: list[str]) -> None: ...
    def enqueue_results(self, items: Sequence[Enqueue], plan: Any, replies: list[Any]) -> list[Job]: ...
    def run_calls(self, calls: list[Call]) -> list[Any]: ...
    def run_transaction(self, calls: list[Call]) -> list[Any]: ...
    def read(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]: ...
    def fetch(self, refs: Sequence[tuple[str, str]]) -> list[Job]: ...
    def queues_of(self, ids: Sequence[str]) -> dict[str, str]: ...
    def states_of(self, ids: Sequence[str]) -> dict[str, str]: ...
    def now(self) -> float: ...


log = logging.getLogger("deferq.redis")
Homes = Callable[[str], Sequence[Store]]
Ref = tuple[Store, str, str]  # (backend, queue, job id)
_FINISHED = {str(state) for state in FINISHED_STATES}


def child_member(queue: str, job_id: str) -> str:
    """How a parent's children set names a child (queue names have no spaces)."""
    return f"{queue} {job_id}"


def link_section(position: int, item: Enqueue) -> list[Any]:
    """The ARGV that enqueue.lua reads after the items for an item that runs after
    others: its number in the call (1-based), all/any, the parent ids."""
    parents = list(dict.fromkeys(item.after))
    return [position, "any" if item.after_any else "all", len(parents), *parents]


def _ids_by_home(ids: Iterable[str], homes: Homes) -> list[tuple[Store, list[str]]]:
    """The distinct ids, grouped by each backend that may hold them."""
    by_backend: dict[int, tuple[Store, list[str]]] = {}
    for job_id in dict.fromkeys(ids):
        for backend in homes(job_id):
            by_backend.setdefault(id(backend), (backend, []))[1].append(job_id)
    return list(by_backend.values())


def locate(ids: Iterable[str], homes: Homes) -> dict[str, tuple[Store, str]]:
    """(backend, queue) of each job id found; ids not found are left out."""
    found: dict[str, tuple[Store, str]] = {}
    for backend, group in _ids_by_home(ids, homes):
        for job_id, queue in backend.queues_of(group).items():
            found.setdefault(job_id, (backend, queue))
    return found


Parts = Sequence[tuple[Store, Sequence[Enqueue]]]
Links = dict[tuple[int, str], tuple[Store, list[Any]]]  # (backend, parent queue) -> link.lua ARGV


def enqueue_linked(parts: Parts, homes: Homes) -> list[list[Job]]:
    """Store jobs some of which run after others (in this call or already stored), each
    part on its backend; the jobs of each part as stored, in order.

    An unknown parent raises before anything is stored. The children are stored
    blocked (and in their queue's `linking` set), then linked, then taken out of
    `linking`; a parent found finished is released at once. On one server (one part,
    parents there too) the stores and links go in one MULTI/EXEC: all or nothing.
    Across slots or servers they go one script after another; a producer that dies
    between them leaves children in `linking`, which the sweep links (`relink_due`)."""
    links = _links(parts, _parents(parts, homes))
    plans = [(backend, items, backend.enqueue_plan(items)) for backend, items in parts]
    for backend, _, plan in plans:
        backend.register_queues(plan.new_queues)
    link_calls = _link_calls(links)
    children = [(backend, [(it.job.queue, it.job.id) for it in items if it.after]) for backend, items in parts]
    done_calls = [(backend, call) for backend, refs in children for call in _linked_calls(backend, refs)]
    single = parts[0][0]
    if len(parts) == 1 and single.transactions and all(b is single for b, _ in link_calls):
        calls = plans[0][2].calls
        replies = single.run_transaction([*calls, *(c for _, c in link_calls), *(c for _, c in done_calls)])
        stored_replies, link_replies = [replies[: len(calls)]], replies[len(calls) : len(calls) + len(link_calls)]
    else:
        stored_replies = [backend.run_calls(plan.calls) for backend, _, plan in plans]
        link_replies = [backend.run_calls([call])[0] for backend, call in link_calls]
        for backend, call in done_calls:
            backend.run_calls([call])
    stored = [
        backend.enqueue_results(items, plan, replies)
        for (backend, items, plan), replies in zip(plans, stored_replies, strict=True)
    ]
    moved = _after_links(links, link_replies, homes)
    out = []
    for (backend, items), jobs in zip(parts, stored, strict=True):
        jobs = [job.evolve(state=JobState.BLOCKED) if item.after and job.id == item.job.id else job
                for item, job in zip(items, jobs, strict=True)]
        if moved:  # a parent had finished already: read back how its children ended up
            refs = [(job.queue, job.id) for job in jobs if job.state == JobState.BLOCKED]
            fresh = {job.id: job for job in backend.fetch(refs)}
            jobs = [fresh.get(job.id, job) for job in jobs]
        out.append(jobs)
    return out


def _link_calls(links: Links) -> list[tuple[Store, Call]]:
    return [(backend, Call(scripts.LINK, [backend.keys.queue(q).job_prefix], args))
            for (_, q), (backend, args) in links.items()]


def _linked_calls(backend: Store, children: Iterable[tuple[str, str]]) -> list[Call]:
    """linked.lua for children (queue, id) on one backend, one call per queue (per
    slot): their links are made."""
    by_queue: dict[str, list[str]] = {}
    for queue, child in children:
        by_queue.setdefault(queue, []).append(child)
    return [Call(scripts.LINKED, [backend.keys.queue(q).linking], [len(ids), *ids]) for q, ids in by_queue.items()]


def _after_links(links: Links, replies: list[Any], homes: Homes) -> int:
    """What link.lua answered: parents that had finished are released now (their mark
    is made); a parent gone since it was found cancels its child as a purged one.
    Returns how many children moved."""
    finished: list[Ref] = []
    gone: dict[tuple[int, str], tuple[Store, str, list[tuple[str, str, str | None]]]] = {}
    for ((_, queue), (backend, args)), states in zip(links.items(), replies, strict=True):
        for i, state in enumerate(states):
            parent, member = args[2 * i], args[2 * i + 1]
            if state == b"":
                child_queue, child = member.split(" ", 1)
                for home in homes(child):
                    entry = gone.setdefault((id(home), child_queue), (home, child_queue, []))
                    entry[2].append((child, parent, None))
            elif state.decode() in _FINISHED:
                finished.append((backend, queue, parent))
    moved = release(list(dict.fromkeys(finished)), homes) if finished else 0
    for home, child_queue, edges in gone.values():
        moved += release_edges(home, child_queue, edges, homes)
    return moved


def relink_due(backend: Store, queues: Sequence[str], homes: Homes, limit: int) -> int:
    """The sweep's part for producers that died mid-enqueue (Cluster, shards): children
    left in `linking` past its grace are linked again (link.lua adds what is missing;
    an edge made already is made once), a parent not found counts as purged. Returns
    how many children moved."""
    now = repr(backend.now())
    found = backend.read([("zrangebyscore", backend.keys.queue(q).linking, "-inf", now, 0, limit) for q in queues])
    children = [(q, job_id.decode()) for q, ids in zip(queues, found, strict=True) for job_id in ids]
    if not children:
        return 0
    reads = []
    for queue, child in children:
        qk = backend.keys.queue(queue)
        reads += [("hget", qk.job(child), "state"), ("smembers", qk.parents(child))]
    replies = backend.read(reads)
    blocked = [(q, c, [p.decode() for p in replies[2 * i + 1]])
               for i, (q, c) in enumerate(children) if replies[2 * i] == b"blocked"]
    where = locate([p for _, _, parents in blocked for p in parents], homes)
    links: Links = {}
    gone: dict[str, list[tuple[str, str, str | None]]] = {}
    for queue, child, parents in blocked:
        for parent in parents:
            if parent in where:
                home, parent_queue = where[parent]
                entry = links.setdefault((id(home), parent_queue), (home, []))
                entry[1].extend((parent, child_member(queue, child)))
            else:
                gone.setdefault(queue, []).append((child, parent, None))
    moved = _after_links(links, [home.run_calls([call])[0] for home, call in _link_calls(links)], homes)
    for queue, edges in gone.items():
        moved += release_edges(backend, queue, edges, homes)
    backend.run_calls(_linked_calls(backend, children))
    return moved


def _parents(parts: Parts, homes: Homes) -> dict[str, tuple[Store, str]]:
    """(backend, queue) of every parent the items name: in the call, or found in the
    store (an unknown one raises)."""
    here = {item.job.id: (backend, item.job.queue) for backend, items in parts for item in items}
    outside = [p for _, items in parts for item in items for p in item.after if p not in here]
    found = locate(outside, homes) if outside else {}
    for item in (item for _, items in parts for item in items):
        unknown = next((p for p in item.after if p not in here and p not in found), None)
        if unknown is not None:
            raise deps.unknown_parent(item.job.id, unknown)
    return {**found, **here}


def _links(parts: Parts, where: dict[str, tuple[Store, str]]) -> Links:
    """link.lua's ARGV per (backend, parent queue): (parent, child) pairs."""
    links: Links = {}
    for item in (item for _, items in parts for item in items):
        for parent in dict.fromkeys(item.after):
            backend, queue = where[parent]
            entry = links.setdefault((id(backend), queue), (backend, []))
            entry[1].extend((parent, child_member(item.job.queue, item.job.id)))
    return links


def release_or_leave(refs: Sequence[Ref], homes: Homes) -> int:
    """`release`, right after the finish: a server that cannot be reached (a child's
    shard) leaves the marks to the sweep, which is as good, so that the finish itself
    is not reported as failed (its settle applied)."""
    try:
        return release(refs, homes)
    except StoreUnavailable as exc:
        log.warning("jobs that run after %d finished job(s) wait for the next sweep: %s", len(refs), exc)
        return 0


def release(refs: Sequence[Ref], homes: Homes) -> int:
    """The children of the finished parents `refs` hear of their outcome; a child that
    is cancelled passes it on to its own children. Returns how many children moved."""
    moved = 0
    todo = list(refs)
    while todo:
        edges: dict[tuple[int, str], tuple[Store, str, list[Any]]] = {}
        heard: list[tuple[Store, Call]] = []
        for backend, group in _by_backend(todo):
            reads = []
            for queue, parent in group:
                qk = backend.keys.queue(queue)
                reads += [("hget", qk.job(parent), "state"), ("smembers", qk.children(parent))]
            replies = backend.read(reads)
            for i, (queue, parent) in enumerate(group):
                raw, members = replies[2 * i], replies[2 * i + 1]
                state = raw.decode() if raw else None
                qk = backend.keys.queue(queue)
                if deps.verdict(state, True) == deps.WAIT:  # back to waiting (retry_dead): later
                    heard.append((backend, Call(scripts.RELEASED, [qk.children(parent), qk.released], [parent])))
                    continue
                verdicts = [deps.verdict(state, False), deps.verdict(state, True), deps.reason(parent, state)]
                for member in members:
                    child_queue, child = member.decode().split(" ", 1)
                    for home in homes(child):
                        entry = edges.setdefault((id(home), child_queue), (home, child_queue, []))
                        entry[2].extend((child, parent, *verdicts))
                names = [m.decode() for m in members]
                done = Call(scripts.RELEASED, [qk.children(parent), qk.released], [parent, *names])
                heard.append((backend, done))
        todo = []
        for home, child_queue, args in edges.values():
            count, cascade = _release_call(home, child_queue, args)
            moved += count
            todo += [(home, child_queue, child) for child in cascade]
        by_backend: dict[int, tuple[Store, list[Call]]] = {}
        for backend, call in heard:
            by_backend.setdefault(id(backend), (backend, []))[1].append(call)
        for backend, calls in by_backend.values():
            backend.run_calls(calls)  # one round trip per server
    return moved


def release_edges(
    backend: Store, queue: str, edges: list[tuple[str, str, str | None]], homes: Homes
) -> int:
    """Edges (child id, parent id, parent's state) of children in `queue` on `backend`
    taken away at once (a parent purged before its link: state None)."""
    args: list[Any] = []
    for child, parent, state in edges:
        args += [child, parent, deps.verdict(state, False), deps.verdict(state, True), deps.reason(parent, state)]
    count, cascade = _release_call(backend, queue, args)
    return count + (release([(backend, queue, child) for child in cascade], homes) if cascade else 0)


def _release_call(backend: Store, queue: str, args: list[Any]) -> tuple[int, list[str]]:
    qk = backend.keys.queue(queue)
    keys = [*qk.step_up_keys, qk.blocked, qk.cancelled]
    reply = backend.run_calls([Call(scripts.RELEASE, keys, args)])[0]
    return int(reply[0]), [child.decode() for child in reply[1:]]


def _by_backend(refs: Iterable[Ref]) -> list[tuple[Store, list[tuple[str, str]]]]:
    groups: dict[int, tuple[Store, list[tuple[str, str]]]] = {}
    for backend, queue, job_id in refs:
        groups.setdefault(id(backend), (backend, []))[1].append((queue, job_id))
    return list(groups.values())


def due_marks(backend: Store, queues: Sequence[str], limit: int) -> list[Ref]:
    """Finished parents whose children a crashed backend may not have released (the
    `released` marks due by now), at most `limit` per queue."""
    now = repr(backend.now())
    replies = backend.read([("zrangebyscore", backend.keys.queue(q).released, "-inf", now, 0, limit)
                            for q in queues])
    return [(backend, q, job_id.decode()) for q, ids in zip(queues, replies, strict=True) for job_id in ids]


def dependents(backend: Store, queue: str, job_id: str) -> list[str]:
    """Ids of the children that have not heard of `job_id` yet."""
    members = backend.read([("smembers", backend.keys.queue(queue).children(job_id))])[0]
    return sorted(m.decode().split(" ", 1)[1] for m in members)


def count_states(ids: Sequence[str], homes: Homes) -> dict[str, int]:
    """How many of the jobs `ids` are in each state (unknown ones are left out)."""
    states: dict[str, str] = {}
    for backend, group in _ids_by_home(ids, homes):
        for job_id, state in backend.states_of(group).items():
            states.setdefault(job_id, state)
    counts: dict[str, int] = {}
    for state in states.values():
        counts[state] = counts.get(state, 0) + 1
    return counts
