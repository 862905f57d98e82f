"""Claims on the SQL stores take jobs in exactly the memory store's order, also over
several queues at once (PostgreSQL merges per-queue index ranges; MySQL reads them
level by level; the update-first claim sorts): preferred priority, due time, then
enqueue order."""

from __future__ import annotations

import random

import pytest

import deferq


def claim_order(url: str, calls: list[tuple[str, int, float]], rounds: list[tuple]) -> list[list[int]]:
    """Enqueue `calls` (queue, priority, due) one by one, then claim round by round
    (queues, limit, priority order); the job numbers each claim took, in order."""
    app = deferq.App(url)
    try:
        for number, (queue, priority, due) in enumerate(calls):
            app.enqueue("noop", [number], queue=queue, priority=priority, at=due)
        taken = []
        for queues, limit, order in rounds:
            jobs = app.backend.reserve(list(queues), limit, "w", 30.0, order)
            taken.append([job.args[0] for job in jobs])
        return taken
    finally:
        app.close()


@pytest.mark.parametrize("seed", [4, 5, 6])
@pytest.mark.parametrize("store", ["postgres", "mysql", "mysql_update"])
def test_claims_over_several_queues_follow_the_memory_store(store, seed, request):
    url = request.getfixturevalue(f"{store}_url")
    rng = random.Random(seed)
    past = 1_700_000_000.0
    # Due times collide on purpose (enqueue order must break the ties).
    calls = [(rng.choice("abc"), rng.choice((0, 1, 2)), past + rng.choice((0, 1, 2, 3)))
             for _ in range(60)]
    # Every level in each order, as the worker's rotation passes them (with fewer, the
    # memory store still takes the levels left out, last; SQLite does not).
    orders = [(0, 1, 2), (1, 0, 2), (2, 1, 0), (1, 2, 0)]
    rounds = [(("a", "b"), rng.choice((1, 3, 5)), rng.choice(orders))
              for _ in range(25)] + [(("c",), 50, (0, 1, 2))]
    expected = claim_order("memory://", calls, rounds)
    assert claim_order(url, calls, rounds) == expected
    assert sum(map(len, expected)) > 30  # the rounds really did take jobs
