"""The deduplication window (`unique_for`) is kept by the store's own step, on every
store: a producer that looked before the key's job succeeded, and stores after, gets
that job back, and producers racing on the key make no new job (Enqueue.answered_by)."""

from __future__ import annotations

import asyncio
import threading
import uuid

import deferq
from deferq.backends.base import Outcome
from deferq.options import JobOptions

PRIORITIES = (0, 1, 2)
AFTER_SUCCESS = 3  # enqueues each producer makes once the key's job has succeeded


def windowed(app: deferq.App, key: str, queue: str) -> list:
    """An enqueue of `key` with a window, as the store's step takes it."""
    call = deferq.Call("noop", (1,), {}, JobOptions.parse(key=key, unique_for=60, queue=queue))
    items, _ = app.runtime.prepare([call])
    return items


def store_step(app: deferq.App, key: str, queue: str) -> str:
    """One enqueue of `key` by the store's step alone, as a producer whose look came too
    early would make it (no look before it); the id that answers."""
    return app.backend.enqueue_many(windowed(app, key, queue))[0].id


def test_a_producer_that_looked_too_early_gets_the_job_that_succeeded(app, backend):
    queue = f"w-{uuid.uuid4().hex[:6]}"
    holder = app.enqueue("noop", [0], key="early", queue=queue)
    (leased,) = backend.reserve([queue], 1, "w", 30, PRIORITIES)
    assert backend.settle([Outcome(leased, "succeeded")]) == [True]
    assert store_step(app, "early", queue) == holder.id
    assert asyncio.run(backend.enqueue_many_async(windowed(app, "early", queue)))[0].id == holder.id  # async too
    assert backend.get_by_key("early").id == holder.id


def race_once(app: deferq.App, key: str, queue: str) -> tuple[str, list[str]]:
    """Two producers enqueue `key` while its job, leased, succeeds; then a few times
    more each. The holder's id, and every id that answered."""
    backend = app.backend
    holder = app.enqueue("noop", [0], key=key, queue=queue)
    (leased,) = backend.reserve([queue], 1, "w", 30, PRIORITIES)
    start, settled = threading.Barrier(3), threading.Event()
    answers: list[str] = []
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            start.wait(timeout=10)
            while not settled.is_set():
                answers.append(store_step(app, key, queue))
            for _ in range(AFTER_SUCCESS):
                answers.append(store_step(app, key, queue))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=produce) for _ in range(2)]
    for thread in threads:
        thread.start()
    start.wait(timeout=10)
    assert backend.settle([Outcome(leased, "succeeded")]) == [True]
    settled.set()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors and len(answers) >= 2 * AFTER_SUCCESS
    return holder.id, answers


def test_producers_racing_the_success_of_a_keys_job_make_no_new_job(app, backend):
    queue = f"w-{uuid.uuid4().hex[:6]}"
    for round_ in range(6):
        holder, answers = race_once(app, f"race:{round_}", queue)
        assert set(answers) == {holder}, f"round {round_}: new jobs {set(answers) - {holder}}"
        assert backend.get_by_key(f"race:{round_}").id == holder
