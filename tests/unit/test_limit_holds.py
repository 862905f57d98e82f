"""The store's notes of held jobs (Records.limit_hold / limit_release), as a property: a
release of a name makes due exactly the jobs still waiting for the time noted under it,
whatever happened to the others since, in batches of any size. On the memory store here
(the contract suite runs the same calls on every store with thousands of jobs)."""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

import deferq
from deferq.backends import memory
from deferq.backends.base import Outcome, OutcomeKind
from deferq.job import JobState

FATES = ("held", "other name", "run now", "cancelled", "retried later", "held twice")


@settings(max_examples=60, deadline=None)
@given(fates=st.lists(st.sampled_from(FATES), min_size=1, max_size=25), batch=st.integers(1, 6))
def test_a_release_makes_due_exactly_the_jobs_still_held_by_its_name(fates, batch):
    app = deferq.App("memory://")
    store = app.backend
    stored = [app.enqueue("t", [i]) for i in range(len(fates))]
    jobs = store.reserve(["default"], len(fates), "w", 60, (0, 1, 2))
    now = store.now()
    due = {job.id: now + 100 + i for i, job in enumerate(jobs)}
    for job, fate in zip(jobs, fates, strict=True):
        store.limit_hold(("b",) if fate == "other name" else ("a",), [(job, due[job.id])])
    assert all(store.settle([Outcome(job, OutcomeKind.SNOOZE, due=due[job.id]) for job in jobs]))
    for job, fate in zip(jobs, fates, strict=True):
        if fate in ("retried later", "held twice"):  # due again, leased, and waiting for another time
            assert store.run_now(job.id)
            [again] = store.reserve(["default"], 1, "w", 60, (0, 1, 2))
            assert again.id == job.id
            if fate == "held twice":  # held anew under the name: the newer note counts
                due[job.id] = now + 500
                store.limit_hold(("a",), [(again, due[job.id])])
            if fate == "held twice":
                assert store.settle([Outcome(again, OutcomeKind.SNOOZE, due=due[job.id])])
            else:
                assert store.settle([Outcome(again, OutcomeKind.RETRY, delay=50)])
    for job, fate in zip(jobs, fates, strict=True):  # then (no job is due while the others are leased)
        if fate == "run now":
            assert store.run_now(job.id)
        elif fate == "cancelled":
            assert store.cancel(job.id)
    before = {job.id: store.get(job.id) for job in stored}

    with mock.patch.object(memory, "HOLD_BATCH", batch):
        released = store.limit_release("a")

    expected = {job.id for job, fate in zip(jobs, fates, strict=True) if fate in ("held", "held twice")}
    assert released == len(expected)
    for job in stored:
        after = store.get(job.id)
        if job.id in expected:
            assert after.state == JobState.QUEUED and after.run_at <= store.now()
        else:
            assert (after.state, after.run_at) == (before[job.id].state, before[job.id].run_at)
    assert store.limit_release("a") == 0  # the notes taken are gone
