"""The deduplication window: `options(key=..., unique_for=3600)`.

A key makes a second enqueue answer the unfinished job that holds it (the store's own
atomic step). With `unique_for`, a job with the key that *succeeded* within that many
seconds answers too, instead of a new job: the enqueue looks for the key's newest job
(`get_by_key`, which every store answers for finished jobs as well, by an index) just
before the store is asked. A job that went dead or was cancelled does not hold its key:
the next enqueue makes a new one, so a failure can be retried by enqueuing again.

One store read per job with a window, none for the others. The look and the store's
step are two calls, so the store checks the window again in the step that stores (the
enqueue script on Redis, the insert's transaction in SQL, under the memory store's
lock): a job that succeeds in between answers too, and producers that race make no
new job (tests/contract: test_unique_for_race).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..backends.base import Backend, Enqueue
from ..job import Job, JobState


def finished_within(backend: Backend, items: list[Enqueue]) -> dict[int, Job]:
    """item index -> the job that answers it: one with its key that succeeded within its window."""
    found: dict[int, Job] = {}
    now: float | None = None
    for i, item in enumerate(items):
        key = item.job.key
        if item.unique_for is None or key is None:
            continue
        job = backend.get_by_key(key)
        if job is None or job.state != JobState.SUCCEEDED:
            continue
        now = backend.now() if now is None else now
        if item.answered_by(job, now):
            found[i] = job
    return found


def merged(items: list[Enqueue], found: dict[int, Job], stored: list[Job]) -> list[Job]:
    """The answers in the items' order: the finished jobs found, the stored ones between."""
    fresh = iter(stored)
    return [found[i] if i in found else next(fresh) for i in range(len(items))]


def windowed(backend: Backend, items: list[Enqueue], store: Callable[[list[Enqueue]], list[Job]]
             ) -> Callable[[list[Enqueue]], list[Job]]:
    """`store`, or, when an item has a window, `store` answering the items whose key
    succeeded within it without asking the store."""
    if not any(item.unique_for for item in items):
        return store

    def store_the_rest(items: list[Enqueue]) -> list[Job]:
        found = finished_within(backend, items)
        rest = [item for i, item in enumerate(items) if i not in found]
        return merged(items, found, store(rest) if rest else [])

    return store_the_rest


def windowed_async(
    backend: Backend, items: list[Enqueue], store: Callable[[list[Enqueue]], Awaitable[list[Job]]],
    look: Callable[[Callable[[], dict[int, Job]]], Awaitable[dict[int, Job]]],
) -> Callable[[list[Enqueue]], Awaitable[list[Job]]]:
    """The same for an async store call; `look` runs the (blocking) look off the event loop."""
    if not any(item.unique_for for item in items):
        return store

    async def store_the_rest(items: list[Enqueue]) -> list[Job]:
        found = await look(lambda: finished_within(backend, items))
        rest = [item for i, item in enumerate(items) if i not in found]
        return merged(items, found, await store(rest) if rest else [])

    return store_the_rest
