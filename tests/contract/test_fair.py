"""Fair queues (options.fair_key, backends/fair.py) on every store: the keys with work are
served round-robin, each key's jobs in order, composed with priorities, retries, cancels
and the waiting jobs' counts."""

from __future__ import annotations

import pytest

from deferq.backends.base import Outcome
from deferq.job import JobState, Priority

from .test_contract import reserve

ALL = (Priority.HIGH, Priority.NORMAL, Priority.LOW)


def drain(backend, limit=1, queues=("fair",), order=ALL, most=1000):
    """(fair key or "-", first argument) of every job claimed, in claim order, settled as it goes."""
    taken = []
    while len(taken) < most and (jobs := reserve(backend, limit, queues=queues, order=order)):
        taken += [(job.fair_key or "-", job.args[-1]) for job in jobs]
        backend.settle([Outcome(job, "succeeded") for job in jobs])
    return taken


@pytest.fixture
def fair_task(app):
    return app.task(name="fair.work", queue="fair", fair_key="tenant:{tenant}")(lambda tenant, i: i)


def test_a_backlog_never_delays_another_keys_first_job_by_more_than_a_round(app, backend, fair_task):
    app.enqueue_many([fair_task.call("a", i) for i in range(40)])
    app.enqueue_many([fair_task.call(tenant, i) for tenant in "bcd" for i in range(3)])
    taken = drain(backend, limit=3)
    assert len(taken) == 49
    first = {key: next(n for n, (k, _) in enumerate(taken) if k == key) for key in ("tenant:b", "tenant:c")}
    assert max(first.values()) <= 4 + 3  # a's first job and one claim of three: within one round
    last_small = max(n for n, (key, _) in enumerate(taken) if key != "tenant:a")
    assert last_small < 4 * 3 + 3  # three rounds of four keys serve b, c and d entirely
    for key in ("tenant:a", "tenant:b"):  # each key's jobs in enqueue order
        mine = [i for k, i in taken if k == key]
        assert mine == sorted(mine)
    assert app.get(app.enqueue_many([fair_task.call("e", 0)])[0].id).fair_key == "tenant:e"


def test_jobs_without_a_key_are_not_starved_by_fair_ones(app, backend, fair_task):
    app.enqueue_many([fair_task.call("a", i) for i in range(20)])
    plain = [app.enqueue("noop", [i], queue="fair") for i in range(20)]
    taken = drain(backend, limit=2, most=20)
    assert 5 <= sum(key == "-" for key, _ in taken) <= 15  # plain and fair take turns
    plain_order = [i for key, i in drain(backend, limit=2) if key == "-"]
    assert plain_order == sorted(plain_order) and len(plain) == 20


def test_per_call_key_and_weight(app, backend, fair_task):
    heavy = fair_task.options(fair_key="heavy", fair_weight=2)
    app.enqueue_many([heavy.call("x", i) for i in range(20)])
    app.enqueue_many([fair_task.call("light", i) for i in range(20)])
    taken = drain(backend, limit=1, most=15)
    counts = {key: sum(k == key for k, _ in taken) for key in ("heavy", "tenant:light")}
    assert counts["heavy"] >= 9 and counts["tenant:light"] >= 4  # about 2:1
    with pytest.raises(ValueError, match="fair_weight must be a number above 0"):
        fair_task.options(fair_weight=0)


def test_priority_comes_before_fairness(app, backend, fair_task):
    app.enqueue_many([fair_task.call("a", i) for i in range(5)])
    urgent = fair_task.options(priority="high").enqueue("b", 99)
    assert app.get(urgent.id).priority == Priority.HIGH
    [job] = reserve(backend, 1, queues=("fair",), order=ALL)
    assert job.id == urgent.id and job.priority == Priority.HIGH


def test_fair_jobs_wait_count_cancel_and_retry_like_others(app, backend, fair_task):
    jobs = app.enqueue_many([fair_task.call("a", i) for i in range(3)])
    later = fair_task.options(delay=3600).enqueue("a", 3)
    assert app.get(later.id).state == JobState.SCHEDULED and app.get(jobs[0].id).state == JobState.QUEUED
    counts = app.stats()["fair"]
    assert (counts["queued"], counts["scheduled"]) == (3, 1)
    assert {job.id for job in app.list_jobs(JobState.QUEUED, queue="fair")} == {job.id for job in jobs}
    assert app.cancel(jobs[1].id) is True
    assert app.stats()["fair"]["queued"] == 2
    [first] = reserve(backend, 1, queues=("fair",))
    assert first.id == jobs[0].id and first.fair_key == "tenant:a"
    assert backend.settle([Outcome(first, "retry", delay=0.0, error="again")]) == [True]
    taken = {job.id for job in reserve(backend, 5, queues=("fair",))}
    assert taken == {jobs[0].id, jobs[2].id}  # the retried job is claimed again; the delayed one waits


def test_a_replaced_fair_job_waits_for_its_new_due_time(app, backend, fair_task):
    first = fair_task.options(key="report:1").enqueue("a", 1)
    again = fair_task.options(key="report:1", on_conflict="replace", delay=3600).enqueue("a", 2)
    assert again.id == first.id and app.get(first.id).state == JobState.SCHEDULED
    assert reserve(backend, 5, queues=("fair",)) == []  # moved to its new due time, out of the fair line
    assert app.get(first.id).args == ("a", 2) and app.get(first.id).fair_key == "tenant:a"


def test_a_fair_queue_serves_its_tasks_keys_round_robin(app, backend):
    app.fair_queue("fair", key="tenant:{tenant}", weights={"tenant:b": 2})
    task = app.task(name="fair.queued", queue="fair")(lambda tenant, i: i)
    app.enqueue_many([task.call("a", i) for i in range(30)])
    app.enqueue_many([task.call(tenant, i) for tenant in "bc" for i in range(6)])
    taken = drain(backend, limit=2, most=12)
    counts = {key: sum(k == key for k, _ in taken) for key in ("tenant:a", "tenant:b", "tenant:c")}
    assert counts["tenant:b"] >= 5 and counts["tenant:c"] >= 2 and counts["tenant:a"] <= 4  # 2:1:1 from the start
    assert [i for k, i in taken if k == "tenant:b"] == sorted(i for k, i in taken if k == "tenant:b")
