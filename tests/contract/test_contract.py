"""The behaviour suite: every backend must move jobs exactly the same way.

Runs once per store in tests/conftest.py STORES. Each test names the invariant of
DESIGN.md it proves.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta

import pytest

import deferq
from deferq.backends.base import Outcome
from deferq.job import JobState, Priority
from deferq.options import JobOptions
from deferq.worker.priorities import PriorityRotation

ALL = (0, 1, 2)
WORKER = "test-worker"


def enqueue(app, n=1, task="noop", **options):
    return [app.enqueue(task, [i], **options) for i in range(n)]


def reserve(backend, limit=1, queues=("default",), worker=WORKER, lease=5.0, order=ALL):
    return backend.reserve(list(queues), limit, worker, lease, order)


def wait_until(predicate, timeout=5.0, step=0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


# -- producing --------------------------------------------------------------------


def test_enqueue_returns_stored_job(app):
    job = app.enqueue("send", [42, "a@b.c"], {"x": 1}, queue="email", priority="high")
    assert job.state == JobState.QUEUED
    assert (job.task, job.args, job.kwargs, job.queue) == ("send", (42, "a@b.c"), {"x": 1}, "email")
    assert job.priority == Priority.HIGH and job.attempts == 0
    stored = app.get(job.id)
    assert stored is not None and stored.args == (42, "a@b.c") and stored.kwargs == {"x": 1}
    assert stored.state == JobState.QUEUED


def test_ids_sort_by_creation(app):
    jobs = enqueue(app, 50)
    assert [j.id for j in jobs] == sorted(j.id for j in jobs)
    assert len({j.id for j in jobs}) == 50


def test_enqueue_many_is_ordered_and_complete(app, backend):
    task = app.task(name="noop")(lambda i: i)
    jobs = app.enqueue_many([task.call(i) for i in range(100)])
    assert [j.args[0] for j in jobs] == list(range(100))
    assert all(app.get(j.id) is not None for j in jobs)
    assert app.enqueue_many([]) == []


def test_unknown_job_is_none(app):
    assert app.get("01NOSUCHJOB0000000000000000") is None
    assert app.get_by_key("no-such-key") is None
    assert app.cancel("01NOSUCHJOB0000000000000000") is False
    assert app.retry_dead("01NOSUCHJOB0000000000000000") is False


# -- order (invariant 5) ----------------------------------------------------------


def test_fifo_within_a_priority(app, backend):
    jobs = enqueue(app, 30)
    taken = [reserve(backend)[0].id for _ in range(30)]
    assert taken == [j.id for j in jobs]
    assert reserve(backend) == []


def test_batch_reserve_keeps_fifo(app, backend):
    jobs = enqueue(app, 25)
    taken = [j.id for _ in range(3) for j in reserve(backend, limit=10)]
    assert taken == [j.id for j in jobs]


def test_earlier_due_time_goes_first(app, backend):
    now = backend.now()
    later = app.enqueue("noop", [1], at=now - 1)
    earlier = app.enqueue("noop", [2], at=now - 5)
    assert [j.id for j in reserve(backend, limit=2)] == [earlier.id, later.id]


def test_priority_preference_order_is_followed(app, backend):
    low = app.enqueue("noop", [0], priority="low")
    normal = app.enqueue("noop", [1], priority="normal")
    high = app.enqueue("noop", [2], priority="high")
    assert [j.id for j in reserve(backend, 3, order=(2, 0, 1))] == [low.id, high.id, normal.id]


def test_weighted_priorities_5_3_2_without_starvation(app, backend):
    for level in ("high", "normal", "low"):
        enqueue(app, 60, priority=level)
    rotation = PriorityRotation((5, 3, 2))
    taken = Counter(reserve(backend, order=rotation.next_order())[0].priority for _ in range(100))
    assert taken == {Priority.HIGH: 50, Priority.NORMAL: 30, Priority.LOW: 20}


def test_empty_preferred_level_falls_through(app, backend):
    job = app.enqueue("noop", [0], priority="low")
    assert [j.id for j in reserve(backend, order=(0, 1, 2))] == [job.id]


def test_queues_are_separate(app, backend):
    email = app.enqueue("noop", [0], queue="email")
    app.enqueue("noop", [1], queue="sms")
    assert [j.id for j in reserve(backend, 5, queues=("email", "other"))] == [email.id]
    assert len(reserve(backend, 5, queues=("email", "sms"))) == 1


def test_one_claim_over_several_queues_comes_in_claim_order(app, backend):
    """Priority, then due time and enqueue order across the queues (on a Redis Cluster
    the queues sit in different slots, each claimed by a script of its own): a worker
    makes a chunk task's calls of its jobs in this order."""
    queues = ("email", "sms", "push")
    plain = [app.enqueue("noop", [i], queue=queues[i % 3]) for i in range(6)]
    urgent = app.enqueue("noop", [6], queue="push", priority="high")
    assert [j.id for j in reserve(backend, 10, queues=queues)] == [urgent.id, *(j.id for j in plain)]


# -- delays (never early) -----------------------------------------------------------


def test_delayed_job_is_scheduled_and_never_early(app, backend):
    job = app.enqueue("noop", [0], delay=0.4)
    assert job.state == JobState.SCHEDULED
    assert app.get(job.id).state == JobState.SCHEDULED
    assert reserve(backend) == []
    taken: list = []
    assert wait_until(lambda: bool(taken.extend(reserve(backend))) or bool(taken), timeout=5)
    assert taken[0].id == job.id
    assert backend.now() >= job.run_at


def test_at_in_the_past_is_due_now(app, backend):
    job = app.enqueue("noop", [0], at=backend.now() - 60)
    assert job.state == JobState.QUEUED
    assert reserve(backend)[0].id == job.id


def test_wait_for_work_wakes_on_enqueue(app, backend):
    enqueued: list[float] = []  # when the enqueue returned (late on a loaded machine)
    start = time.monotonic()
    timer = threading.Timer(0.2, lambda: (app.enqueue("noop", [0]), enqueued.append(time.monotonic())))
    timer.start()
    try:
        backend.wait_for_work(["default"], 3.0)
    finally:
        timer.join()
    # woken, not timed out: back well before the 3 s timeout, or soon after a slow enqueue
    assert time.monotonic() < max(start + 2.5, enqueued[0] + 1.0)
    assert len(reserve(backend)) == 1


def test_wait_for_work_returns_at_next_due_time(app, backend):
    app.enqueue("noop", [0], delay=0.3)
    start = time.monotonic()
    backend.wait_for_work(["default"], 5.0)
    assert time.monotonic() - start < 2.0


def wait_and_reserve(backend, timeout, limit=5):
    """An idle worker's wait (the worker's lease loop): the jobs it leased, and the seconds it took."""
    start = time.monotonic()
    jobs = backend.wait_and_reserve(["default"], timeout, limit, WORKER, 5.0, ALL)
    return jobs, time.monotonic() - start


def test_wait_and_reserve_leases_the_job_enqueued_during_the_wait(app, backend):
    timer = threading.Timer(0.2, lambda: app.enqueue("noop", [7]))
    timer.start()
    try:
        jobs, took = wait_and_reserve(backend, 3.0)
        if not jobs:  # a sharded store's other server woke the wait: one more
            jobs, took2 = wait_and_reserve(backend, 3.0)
            took += took2
    finally:
        timer.join()
    assert took < 2.5
    assert [(j.args, j.state, j.worker, j.attempts) for j in jobs] == [((7,), JobState.ACTIVE, WORKER, 1)]
    assert reserve(backend) == []


def test_wait_and_reserve_leases_a_job_as_it_falls_due(app, backend):
    job = app.enqueue("noop", [0], delay=0.3)
    jobs, took = wait_and_reserve(backend, 5.0)
    if not jobs:  # woken early (a shard's wake token): the job is still not due
        jobs, took2 = wait_and_reserve(backend, 5.0)
        took += took2
    assert [j.id for j in jobs] == [job.id] and took < 2.0
    assert backend.now() >= jobs[0].run_at


def test_wait_and_reserve_ends_at_its_timeout_with_nothing(app, backend):
    wait_and_reserve(backend, 0.05)  # a wake token left by an earlier enqueue
    jobs, took = wait_and_reserve(backend, 0.3)
    assert jobs == [] and took < 1.5


# -- leases, attempts, retries (invariants 1, 2) ---------------------------------------


def test_attempts_are_counted_at_lease(app, backend):
    job = app.enqueue("noop", [0])
    leased = reserve(backend)[0]
    assert leased.attempts == 1 and leased.state == JobState.ACTIVE and leased.worker == WORKER
    assert app.get(job.id).attempts == 1
    assert app.get(job.id).state == JobState.ACTIVE


def test_succeeded_keeps_result(app, backend):
    job = app.enqueue("noop", [0])
    leased = reserve(backend)[0]
    assert backend.settle([Outcome(leased, "succeeded", result={"sent": True})]) == [True]
    done = app.get(job.id)
    assert done.state == JobState.SUCCEEDED and done.result == {"sent": True}
    assert done.finished_at is not None and done.lease_until is None


def test_retry_waits_for_its_backoff(app, backend):
    job = app.enqueue("noop", [0])
    leased = reserve(backend)[0]
    # 1.5 s: read back and claimed again before it is due, even on a loaded machine (0.3 s
    # once passed between the settle and the read)
    assert backend.settle([Outcome(leased, "retry", delay=1.5, error="boom")]) == [True]
    retried = app.get(job.id)
    assert retried.state == JobState.SCHEDULED and retried.error == "boom"
    assert reserve(backend) == []
    taken: list = []
    assert wait_until(lambda: bool(taken.extend(reserve(backend))) or bool(taken))
    assert taken[0].attempts == 2


def test_run_now_makes_a_scheduled_or_retrying_job_due(app, backend):
    later = app.enqueue("noop", [0], delay=600, priority="high")
    assert reserve(backend) == []
    assert app.run_now(later.id) is True
    assert app.get(later.id).state == JobState.QUEUED and app.run_now(later.id) is False  # due already
    assert [j.id for j in reserve(backend)] == [later.id]
    assert app.run_now(later.id) is False and app.run_now("no-such-job") is False  # running; unknown
    failing = app.enqueue("noop", [1])
    leased = [j for j in reserve(backend) if j.id == failing.id][0]
    assert backend.settle([Outcome(leased, "retry", delay=600, error="boom")]) == [True]
    assert app.get(failing.id).state == JobState.SCHEDULED
    assert app.run_now(failing.id) is True
    again = reserve(backend)[0]
    assert again.id == failing.id and again.attempts == 2  # its attempts are kept


def test_dead_is_kept_and_can_be_retried(app, backend):
    job = app.enqueue("noop", [0])
    leased = reserve(backend)[0]
    backend.settle([Outcome(leased, "dead", error="gave up")])
    dead = app.get(job.id)
    assert dead.state == JobState.DEAD and dead.error == "gave up"
    assert [j.id for j in app.list_jobs("dead")] == [job.id]
    assert app.retry_dead(job.id) is True
    assert app.retry_dead(job.id) is False
    again = reserve(backend)[0]
    assert again.id == job.id and again.attempts == 1


def test_release_does_not_count_the_attempt(app, backend):
    job = app.enqueue("noop", [0])
    leased = reserve(backend)[0]
    backend.settle([Outcome(leased, "release")])
    assert app.get(job.id).state == JobState.QUEUED
    assert app.get(job.id).attempts == 0


def test_snooze_waits_without_counting_the_attempt(app, backend):
    job = app.enqueue("noop", [0], max_attempts=1)
    for _ in range(3):  # however often it snoozes, it never runs out of attempts
        leased = reserve(backend)[0]
        assert leased.attempts == 1
        assert backend.settle([Outcome(leased, "snooze", delay=0.0)]) == [True]
        assert app.get(job.id).attempts == 0
    leased = reserve(backend)[0]
    assert backend.settle([Outcome(leased, "snooze", delay=0.4)]) == [True]
    snoozed = app.get(job.id)
    assert snoozed.state == JobState.SCHEDULED and snoozed.attempts == 0
    assert snoozed.run_at >= leased.lease_until - 5 + 0.4 - 0.05  # due after the delay
    assert reserve(backend) == []
    taken: list = []
    assert wait_until(lambda: bool(taken.extend(reserve(backend))) or bool(taken))
    assert taken[0].id == job.id and taken[0].attempts == 1
    assert backend.now() >= snoozed.run_at


def test_snooze_keeps_the_unique_key(app, backend):
    job = app.enqueue("noop", [0], key="snoozing")
    backend.settle([Outcome(reserve(backend)[0], "snooze", delay=30)])
    assert app.enqueue("noop", [1], key="snoozing").id == job.id


def test_a_key_that_succeeded_within_its_window_answers_the_enqueue(app, backend):
    first = app.enqueue("noop", [0], key="report:7", unique_for=3600)
    backend.settle([Outcome(reserve(backend)[0], "succeeded", result=1)])
    again = app.enqueue("noop", [1], key="report:7", unique_for=timedelta(hours=1))
    assert (again.id, again.state, again.args) == (first.id, JobState.SUCCEEDED, (0,))
    # in a batch, in order, beside new jobs; without a window the key is free once finished
    answers = app.enqueue_many([deferq.Call("noop", (2,), {}, JobOptions.parse(key="other", unique_for=60)),
                                deferq.Call("noop", (3,), {}, JobOptions.parse(key="report:7", unique_for=60))])
    assert answers[1].id == first.id and answers[0].id != first.id and answers[0].state == JobState.QUEUED
    assert app.enqueue("noop", [4], key="report:7").id != first.id


def test_a_window_holds_for_success_only_and_passes(app, backend):
    done = app.enqueue("noop", [0], key="done-long-ago")
    backend.settle([Outcome(reserve(backend)[0], "succeeded")])
    assert app.enqueue("noop", [1], key="done-long-ago", unique_for=1e-6).id != done.id  # past its window
    failed = app.enqueue("noop", [2], key="dead-one", unique_for=3600, max_attempts=1, queue="other")
    backend.settle([Outcome(reserve(backend, queues=("other",))[0], "dead", error="boom")])
    assert app.enqueue("noop", [3], key="dead-one", unique_for=3600).id != failed.id  # a failure: enqueue anew
    with pytest.raises(ValueError, match="unique_for needs a key"):
        app.enqueue("noop", [4], unique_for=60)


def test_expired_lease_returns_job(app, backend):
    job = app.enqueue("noop", [0], max_attempts=3)
    first = reserve(backend, lease=0.2, worker="crashed")[0]
    assert wait_until(lambda: backend.recover_expired() == 1 or app.get(job.id).state != "active")
    recovered = app.get(job.id)
    assert recovered.state == JobState.QUEUED and recovered.attempts == 1
    second = reserve(backend, worker="alive")[0]
    assert second.id == job.id and second.attempts == 2
    # the crashed worker's late outcome must not overwrite the new owner's work
    assert backend.settle([Outcome(first, "succeeded")]) == [False]
    assert backend.heartbeat([first], 5.0) == {job.id}
    assert backend.settle([Outcome(second, "succeeded")]) == [True]


def test_job_that_kills_its_worker_ends_dead(app, backend):
    job = app.enqueue("noop", [0], max_attempts=2)
    for _ in range(2):
        reserve(backend, lease=0.1, worker="crashing")
        assert wait_until(lambda: backend.recover_expired() >= 1, timeout=3)
    dead = app.get(job.id)
    assert dead.state == JobState.DEAD and "lease expired" in dead.error
    assert reserve(backend) == []


def test_heartbeat_keeps_the_lease(app, backend):
    job = app.enqueue("noop", [0])
    leased = reserve(backend, lease=0.3)[0]
    for _ in range(4):
        time.sleep(0.1)
        assert backend.heartbeat([leased], 0.3) == set()
    assert backend.recover_expired() == 0
    assert app.get(job.id).state == JobState.ACTIVE
    assert app.get(job.id).lease_until > backend.now()


def test_progress_is_stored_under_the_lease(app, backend):
    job = app.enqueue("noop", [0])
    assert app.get(job.id).progress is None
    leased = reserve(backend)[0]
    assert backend.record_progress([leased.evolve(progress=0.4, progress_message="3 of 8 files")]) == set()
    seen = app.get(job.id)
    assert (seen.progress, seen.progress_message) == (0.4, "3 of 8 files")
    assert backend.record_progress([leased.evolve(progress=0.5)]) == set()
    assert (app.get(job.id).progress, app.get(job.id).progress_message) == (0.5, None)
    backend.settle([Outcome(leased, "succeeded")])
    assert app.get(job.id).progress == 0.5  # kept after the job ends
    assert backend.record_progress([leased.evolve(progress=0.9)]) == {job.id}  # no lease: not stored
    assert app.get(job.id).progress == 0.5
    assert backend.record_progress([]) == set()


def test_settle_batch_reports_each(app, backend):
    enqueue(app, 4)
    a, b, c, d = reserve(backend, 4)
    assert backend.cancel(d.id) is True  # asked to stop: still ours to settle
    results = backend.settle([
        Outcome(a, "succeeded"), Outcome(b, "retry", delay=10), Outcome(c, "dead", error="x"),
        Outcome(d, "dead", error="stopped"),
    ])
    assert results == [True, True, True, True]
    assert [app.get(j.id).state for j in (a, b, c, d)] == ["succeeded", "scheduled", "dead", "cancelled"]


# -- unique keys (invariant 7) -------------------------------------------------------


def test_unique_key_returns_the_unfinished_job(app, backend):
    first = app.enqueue("noop", [1], key="reset:42")
    second = app.enqueue("noop", [2], key="reset:42")
    assert second.id == first.id and second.args == (1,)
    assert app.get_by_key("reset:42").id == first.id
    leased = reserve(backend)[0]
    assert app.enqueue("noop", [3], key="reset:42").id == first.id  # active still holds it
    backend.settle([Outcome(leased, "succeeded")])
    third = app.enqueue("noop", [4], key="reset:42")
    assert third.id != first.id
    assert app.get_by_key("reset:42").id == third.id
    assert app.get(first.id).state == JobState.SUCCEEDED


def test_scheduled_job_holds_its_key(app):
    first = app.enqueue("noop", [1], key="remind:7", delay=60)
    assert app.enqueue("noop", [2], key="remind:7").id == first.id


def test_unique_key_inside_one_batch(app):
    task = app.task(name="noop")(lambda i: i)
    jobs = app.enqueue_many([task.options(key="k").call(1), task.options(key="k").call(2)])
    assert jobs[0].id == jobs[1].id


def test_on_conflict_replace_updates_the_waiting_job(app, backend):
    first = app.enqueue("noop", [1], key="reindex:42", delay=60)
    second = app.enqueue("noop", [2], {"full": True}, key="reindex:42", on_conflict="replace")
    assert second.id == first.id and second.args == (2,) and second.kwargs == {"full": True}
    assert second.state == JobState.QUEUED and second.run_at <= backend.now()  # its due time too
    stored = app.get(first.id)
    assert (stored.args, stored.kwargs, stored.state) == ((2,), {"full": True}, JobState.QUEUED)
    assert app.enqueue("noop", [3], key="reindex:42").args == (2,)  # ignore: kept as it is
    leased = reserve(backend)
    assert [(j.id, j.args) for j in leased] == [(first.id, (2,))]
    assert app.stats()["default"]["active"] == 1


def test_on_conflict_debounce_pushes_the_due_time_back_up_to_max_wait(app, backend):
    first = app.enqueue("noop", [1], key="digest:7", on_conflict="debounce", delay=0.5, max_wait=1.0)
    assert first.run_at == pytest.approx(first.created_at + 0.5)
    time.sleep(0.2)
    second = app.enqueue("noop", [2], key="digest:7", on_conflict="debounce", delay=0.5, max_wait=1.0)
    assert second.id == first.id and second.args == (2,)
    assert second.run_at > first.run_at + 0.15  # pushed back by the delay
    third = app.enqueue("noop", [3], key="digest:7", on_conflict="debounce", delay=60, max_wait=1.0)
    assert third.run_at == pytest.approx(first.created_at + 1.0)  # never past max_wait
    assert app.get(first.id).run_at == pytest.approx(first.created_at + 1.0)
    assert reserve(backend) == []
    taken: list = []
    assert wait_until(lambda: bool(taken.extend(reserve(backend))) or bool(taken))
    assert (taken[0].id, taken[0].args) == (first.id, (3,))


def test_a_running_job_is_never_replaced_the_new_one_waits_behind_it(app, backend):
    first = app.enqueue("noop", [1], key="sync:9")
    running = reserve(backend)[0]
    second = app.enqueue("noop", [2], key="sync:9", on_conflict="replace")
    assert second.id != first.id and second.state == JobState.QUEUED
    assert app.get(first.id).args == (1,)  # the running job is untouched
    assert reserve(backend, 5) == []  # waits behind it, not beside it
    third = app.enqueue("noop", [3], key="sync:9", on_conflict="debounce")
    assert third.id == second.id and app.get(second.id).args == (3,)  # the waiting one is replaced
    assert app.enqueue("noop", [4], key="sync:9").id == second.id  # ignore: the one that will run
    assert app.get_by_key("sync:9").id == second.id
    assert app.stats()["default"]["queued"] == 1 and app.list_jobs("queued")[0].id == second.id
    assert app.get(second.id).priority == Priority.NORMAL
    backend.settle([Outcome(running, "retry", delay=0, error="again")])  # still the holder
    again = reserve(backend, 5)
    assert [j.id for j in again] == [first.id]
    backend.settle([Outcome(again[0], "succeeded")])  # done: the one behind takes its place
    after = reserve(backend, 5)
    assert [(j.id, j.args) for j in after] == [(second.id, (3,))]


def test_the_job_behind_a_cancelled_holder_runs(app, backend):
    first = app.enqueue("noop", [1], key="k:cancel")
    running = reserve(backend)[0]
    second = app.enqueue("noop", [2], key="k:cancel", on_conflict="replace")
    app.cancel(first.id)
    backend.settle([Outcome(running, "retry", delay=0, error="stopped")])  # ends cancelled
    assert app.get(first.id).state == JobState.CANCELLED
    assert [j.id for j in reserve(backend, 5)] == [second.id]


def test_on_conflict_within_one_batch(app):
    task = app.task(name="noop")(lambda i: i)
    replaced = task.options(key="b", on_conflict="replace")
    jobs = app.enqueue_many([replaced.call(1), replaced.call(2)])
    assert jobs[0].id == jobs[1].id and app.get(jobs[0].id).args == (2,)


def test_on_conflict_needs_a_key(app):
    with pytest.raises(ValueError, match="needs a key"):
        app.enqueue("noop", [1], on_conflict="replace")
    with pytest.raises(ValueError, match="on_conflict must be one of"):
        app.enqueue("noop", [1], key="x", on_conflict="overwrite")
    with pytest.raises(ValueError, match="max_wait is for"):
        app.enqueue("noop", [1], key="x", on_conflict="replace", max_wait=5)


# -- cancel ------------------------------------------------------------------------


def test_cancel_waiting_jobs(app, backend):
    scheduled = app.enqueue("noop", [0], delay=60)
    queued = app.enqueue("noop", [1])
    assert app.cancel(scheduled.id) is True
    assert app.get(scheduled.id).state == JobState.CANCELLED
    assert app.get(scheduled.id).cancel_requested is False
    assert app.cancel(scheduled.id) is False  # finished
    assert app.cancel(queued.id) is True
    assert reserve(backend) == []


def test_cancel_asks_an_active_job_to_stop(app, backend):
    job = app.enqueue("noop", [0])
    leased = reserve(backend)[0]
    assert backend.heartbeat([leased], 5.0).cancel_requested == set()
    assert app.cancel(job.id) is True
    asked = app.get(job.id)
    assert asked.state == JobState.ACTIVE and asked.cancel_requested is True
    assert app.cancel(job.id) is True  # asking again changes nothing
    beat = backend.heartbeat([leased], 5.0)
    assert beat == set() and beat.cancel_requested == {job.id}  # the lease holds; the worker hears it
    assert backend.settle([Outcome(leased, "cancelled", error="cancelled while running")]) == [True]
    done = app.get(job.id)
    assert done.state == JobState.CANCELLED and done.error == "cancelled while running"
    assert done.finished_at is not None and done.lease_until is None
    assert app.cancel(job.id) is False
    assert app.stats()["default"]["cancelled"] == 1


@pytest.mark.parametrize("kind", ["retry", "snooze", "release", "dead"])
def test_a_job_asked_to_stop_never_runs_again(app, backend, kind):
    job = app.enqueue("noop", [0], key="stop-me")
    leased = reserve(backend)[0]
    app.cancel(job.id)
    assert backend.settle([Outcome(leased, kind, delay=0, error="boom")]) == [True]
    assert app.get(job.id).state == JobState.CANCELLED
    assert reserve(backend) == []
    assert app.enqueue("noop", [1], key="stop-me").id != job.id  # the key is free again


def test_a_job_asked_to_stop_may_still_succeed(app, backend):
    job = app.enqueue("noop", [0])
    leased = reserve(backend)[0]
    app.cancel(job.id)
    assert backend.settle([Outcome(leased, "succeeded", result=1)]) == [True]
    assert (app.get(job.id).state, app.get(job.id).result) == (JobState.SUCCEEDED, 1)


def test_an_expired_lease_of_a_job_asked_to_stop_ends_cancelled(app, backend):
    job = app.enqueue("noop", [0])
    reserve(backend, lease=0.2, worker="killed")
    app.cancel(job.id)
    assert wait_until(lambda: backend.recover_expired() == 1)
    recovered = app.get(job.id)
    assert recovered.state == JobState.CANCELLED and "lease expired" in recovered.error
    assert reserve(backend) == []


def test_cancelled_key_is_free_again(app):
    job = app.enqueue("noop", [0], key="once", delay=60)
    app.cancel(job.id)
    assert app.enqueue("noop", [0], key="once").id != job.id


# -- expiry ------------------------------------------------------------------------


def test_an_expired_job_is_never_run_and_ends_cancelled(app, backend):
    doomed = app.enqueue("noop", [0], expires=0.2, key="once-only")
    kept = app.enqueue("noop", [1], expires=60)
    plain = app.enqueue("noop", [2])
    assert doomed.expires_at == pytest.approx(doomed.created_at + 0.2)
    assert app.get(doomed.id).expires_at == pytest.approx(doomed.created_at + 0.2)
    assert app.get(plain.id).expires_at is None
    time.sleep(0.3)
    assert [j.id for j in reserve(backend, 5)] == [kept.id, plain.id]  # the expired one is not leased
    expired = app.get(doomed.id)
    assert expired.state == JobState.CANCELLED and expired.error == "expired" and expired.attempts == 0
    assert expired.finished_at is not None
    assert app.stats()["default"]["cancelled"] == 1
    assert [j.id for j in app.list_jobs("cancelled")] == [doomed.id]
    assert app.enqueue("noop", [3], key="once-only").id != doomed.id  # its key is free


def test_expiry_at_a_time(app, backend):
    from datetime import UTC, datetime, timedelta

    soon = datetime.now(UTC) + timedelta(seconds=60)
    job = app.enqueue("noop", [0], expires=soon)
    assert app.get(job.id).expires_at == pytest.approx(soon.timestamp())
    assert [j.id for j in reserve(backend)] == [job.id]
    late = app.enqueue("noop", [1], expires=datetime.now(UTC) - timedelta(seconds=1))
    assert reserve(backend) == []
    assert app.get(late.id).state == JobState.CANCELLED


def test_a_retry_due_after_the_expiry_is_not_run(app, backend):
    job = app.enqueue("noop", [0], expires=0.3)
    leased = reserve(backend)[0]  # started in time
    backend.settle([Outcome(leased, "retry", delay=0.4, error="boom")])
    assert wait_until(lambda: reserve(backend) == [] and app.get(job.id).state == JobState.CANCELLED)
    assert app.get(job.id).error == "expired" and app.get(job.id).attempts == 1


# -- stats, listing, purge -----------------------------------------------------------


def test_stats_count_every_state(app, backend):
    enqueue(app, 3, queue="q1")
    app.enqueue("noop", [0], queue="q1", delay=60)
    cancelled = app.enqueue("noop", [0], queue="q1", delay=60)
    app.cancel(cancelled.id)
    a, b = reserve(backend, 2, queues=("q1",))
    backend.settle([Outcome(a, "succeeded"), Outcome(b, "dead", error="x")])
    reserve(backend, 1, queues=("q1",))
    stats = app.stats()["q1"]
    expected = {"scheduled": 1, "queued": 0, "active": 1, "succeeded": 1, "dead": 1, "cancelled": 1}
    assert {k: stats[k] for k in expected} == expected


def test_oldest_wait_grows(app, backend):
    app.enqueue("noop", [0], at=backend.now() - 30)
    assert 29 <= app.stats()["default"]["oldest_wait"] < 120


def test_purge_finished_only(app, backend):
    enqueue(app, 2)
    a, b = reserve(backend, 2)
    backend.settle([Outcome(a, "succeeded"), Outcome(b, "dead", error="x")])
    waiting = app.enqueue("noop", [9])
    assert app.purge(["succeeded"], older_than=3600) == 0
    assert app.purge(["succeeded", "dead"]) == 2
    assert app.get(a.id) is None and app.get(b.id) is None
    assert app.get(waiting.id) is not None
    with pytest.raises(ValueError):
        app.purge(["queued"])


def test_list_jobs_by_state_and_queue(app, backend):
    enqueue(app, 2, queue="a")
    enqueue(app, 1, queue="b", delay=60)
    assert len(app.list_jobs("queued")) == 2
    assert len(app.list_jobs("scheduled", queue="b")) == 1
    assert app.list_jobs("scheduled", queue="a") == []


# -- shared records ------------------------------------------------------------------


def test_kv_records(backend):
    assert backend.kv_get("ns", "a") is None
    assert backend.kv_put("ns", "a", b"1") is True
    assert backend.kv_put("ns", "a", b"2", only_new=True) is False
    assert backend.kv_get("ns", "a") == b"1"
    backend.kv_put("ns", "b", b"3", ttl=0.2)
    assert backend.kv_list("ns") == {"a": b"1", "b": b"3"}
    assert wait_until(lambda: backend.kv_get("ns", "b") is None, timeout=3)
    assert backend.kv_put("ns", "b", b"4", ttl=5, only_new=True) is True
    assert backend.kv_delete("ns", "a") is True
    assert backend.kv_delete("ns", "a") is False
    assert backend.kv_list("ns") == {"b": b"4"}
    assert backend.kv_list("other") == {}


def test_kv_list_many_reads_several_namespaces_at_once(backend):
    names = [f"many-{i}" for i in range(12)]  # spread over a cluster's nodes and shards
    backend.kv_put_many([(ns, key, f"{ns}/{key}".encode()) for ns in names[:10] for key in ("x", "y")])
    backend.kv_put(names[0], "gone", b"old", ttl=0.2)
    assert wait_until(lambda: backend.kv_get(names[0], "gone") is None, timeout=3)
    found = backend.kv_list_many(names)
    assert {ns: records for ns, records in found.items() if records} == {
        ns: {"x": f"{ns}/x".encode(), "y": f"{ns}/y".encode()} for ns in names[:10]}
    assert backend.kv_list_many([]) == {}


def test_kv_swap_is_a_compare_and_set(backend):
    assert backend.kv_swap("ns", "s", b"", b"1") is False  # absent: nothing to replace
    backend.kv_put("ns", "s", b"1")
    assert backend.kv_swap("ns", "s", b"2", b"3") is False
    assert backend.kv_swap("ns", "s", b"1", b"2", ttl=0.2) is True
    assert backend.kv_swap("ns", "s", b"1", b"3") is False  # the first swap won
    assert backend.kv_get("ns", "s") == b"2"
    assert wait_until(lambda: backend.kv_get("ns", "s") is None, timeout=3)
    assert backend.kv_swap("ns", "s", b"2", b"4") is False  # an expired record holds nothing
    assert backend.kv_put("ns", "s", b"5", only_new=True) is True
    assert backend.kv_list("ns") == {"s": b"5"}


def test_store_clock_is_sane(backend):
    assert abs(backend.now() - time.time()) < 5


# -- the producer API over the store ---------------------------------------------------


def test_task_options_and_async_enqueue(app):
    @app.task(queue="email", priority="low", max_attempts=7, timeout=9)
    def send(user_id: int) -> None: ...

    job = send.options(priority="high", key="k1").enqueue(1)
    assert (job.queue, job.priority, job.max_attempts, job.timeout, job.key) == (
        "email", Priority.HIGH, 7, 9.0, "k1",
    )
    import asyncio

    job2 = asyncio.run(send.enqueue_async(2))
    assert app.get(job2.id).args == (2,)


def test_bad_input_is_refused_before_storing(app):
    @app.task()
    def f(x): ...

    with pytest.raises(TypeError, match="argument 'x' of f"):
        f.enqueue(object())
    with pytest.raises(ValueError, match="delay"):
        f.options(delay=-1)
    with pytest.raises(ValueError, match="priority"):
        f.options(priority="urgent")
    with pytest.raises(ValueError, match="unknown option"):
        f.options(dealy=1)
    assert app.stats() == {}


def test_retry_exception_type_is_public():
    assert issubclass(deferq.Retry, Exception)


def test_settle_batch_with_one_lost_lease(app, backend):
    enqueue(app, 2)
    kept = reserve(backend, 1)[0]
    lost = reserve(backend, 1, lease=0.1, worker="slow")[0]
    assert wait_until(lambda: backend.recover_expired() == 1)
    assert backend.settle([Outcome(kept, "succeeded"), Outcome(lost, "succeeded")]) == [True, False]
    assert app.get(kept.id).state == JobState.SUCCEEDED
    assert app.get(lost.id).state == JobState.QUEUED


def test_reserve_takes_only_the_levels_named(app, backend):
    app.enqueue("noop", [0], priority="low")
    high = app.enqueue("noop", [1], priority="high")
    assert [j.id for j in reserve(backend, 5, order=(0,))] == [high.id]


# -- waiting for results (issue 14) -------------------------------------------------


def _settle_later(backend, job, kind, delay=0.15, **fields):
    timer = threading.Timer(delay, lambda: backend.settle([Outcome(job, kind, **fields)]))
    timer.start()
    return timer


def test_wait_returns_the_result_when_the_store_says_it_finished(app, backend):
    job = enqueue(app)[0]
    timer = _settle_later(backend, reserve(backend)[0], "succeeded", result={"n": [1, 2]})
    started = time.monotonic()
    assert app.wait(job.id, timeout=10) == {"n": [1, 2]}
    assert time.monotonic() - started < 2  # woken, not found by a slow poll
    timer.join()
    assert app.wait(job.id, timeout=0) == {"n": [1, 2]}  # finished: answered at once


def test_wait_raises_job_failed_with_the_last_error(app, backend):
    job = enqueue(app)[0]
    timer = _settle_later(backend, reserve(backend)[0], "dead", error="Traceback...\nValueError: boom")
    with pytest.raises(deferq.JobFailed, match="dead: ValueError: boom") as caught:
        app.wait(job.id, timeout=10)
    assert caught.value.state == "dead" and "boom" in caught.value.error
    timer.join()


def test_wait_times_out_on_an_unfinished_job(app):
    job = enqueue(app)[0]
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="still queued"):
        app.wait(job.id, timeout=0.3)
    assert 0.25 < time.monotonic() - started < 3
    with pytest.raises(LookupError):
        app.wait("01NOSUCHJOB0000000000000000", timeout=0.1)


# -- dependencies (issue 14) --------------------------------------------------------


def _settle_only(backend, kind, **fields):
    [leased] = reserve(backend)
    assert backend.settle([Outcome(leased, kind, **fields)]) == [True]
    return leased


def test_a_job_after_another_is_blocked_until_it_succeeds(app, backend):
    needs_workflows(backend)
    parent = enqueue(app)[0]
    child = app.enqueue("noop", [9], after=[parent])
    assert child.state == JobState.BLOCKED and app.get(child.id).state == JobState.BLOCKED
    assert app.stats()["default"]["blocked"] == 1
    assert [j.id for j in app.list_jobs("blocked")] == [child.id]
    _settle_only(backend, "succeeded")
    assert app.get(child.id).state == JobState.QUEUED
    assert [j.id for j in reserve(backend, 5)] == [child.id]


def test_a_failed_parent_cancels_its_children_naming_it(app, backend):
    needs_workflows(backend)
    first, second = enqueue(app, 2)
    child = app.enqueue("noop", [1], after=[first, second.id])
    grandchild = app.enqueue("noop", [2], after=child)
    tolerant = app.enqueue("noop", [3], after=[second], after_any_outcome=True)
    assert backend.cancel(second.id)
    cancelled = app.get(child.id)
    assert cancelled.state == JobState.CANCELLED and second.id in cancelled.error
    assert app.get(grandchild.id).state == JobState.CANCELLED and child.id in app.get(grandchild.id).error
    assert app.get(tolerant.id).state == JobState.QUEUED
    late = app.enqueue("noop", [4], after=[second])  # its parent had already failed
    assert late.state == JobState.CANCELLED and second.id in late.error


def test_one_call_links_jobs_across_queues(app, backend):
    """Parents and children of one call in different queues (on a Cluster, slots)."""
    task = app.task(name="noop")(lambda i: i)
    first, second = task.options(queue="a").call(1), task.options(queue="b").call(2)
    first_id, second_id = (j.id for j in app.enqueue_many([first, second]))
    jobs = app.enqueue_many([task.options(queue="c", after=[first_id, second_id]).call(3),
                             task.options(queue="a", after=[second_id]).call(4)])
    assert [j.state for j in jobs] == [JobState.BLOCKED, JobState.BLOCKED]
    for queue in ("b", "a"):
        [leased] = reserve(backend, queues=(queue,))
        assert backend.settle([Outcome(leased, "succeeded")]) == [True]
    assert [app.get(j.id).state for j in jobs] == [JobState.QUEUED, JobState.QUEUED]


def test_a_dead_parent_and_a_finished_one(app, backend):
    needs_workflows(backend)
    parent = enqueue(app)[0]
    _settle_only(backend, "dead", error="boom")
    assert app.enqueue("noop", [1], after=[parent]).state == JobState.CANCELLED
    assert app.enqueue("noop", [2], after=[parent], after_any_outcome=True).state == JobState.QUEUED


def test_get_many_answers_in_order_with_none_for_the_unknown(app, backend):
    """What a chord's callback reads its members' results with (workflow.with_inputs)."""
    first = app.enqueue("noop", [1])
    second = app.enqueue("noop", [2], queue="other")
    found = backend.get_many([second.id, "01NOSUCHJOB0000000000000000", first.id])
    assert [j.id if j else None for j in found] == [second.id, None, first.id]
    assert found[0].queue == "other" and backend.get_many([]) == []


def test_an_unknown_parent_stores_nothing(app, backend):
    needs_workflows(backend)
    task = app.task(name="noop")(lambda i: i)
    with pytest.raises(deferq.ConfigError, match="not in the store"):
        app.enqueue_many([task.call(1), task.options(after=["01NOSUCHJOB0000000000000000"]).call(2)])
    assert app.stats().get("default", {}).get("queued", 0) == 0


def needs_workflows(backend) -> None:
    """Every store takes workflows (kept as a hook for a store that might not)."""


def test_enqueue_not_durable_is_stored_and_claimable(app, backend):
    """options.durable=False changes when the store flushes, never what it stores."""
    task = app.task(name="noop")(lambda i: i)
    one = task.options(durable=False).enqueue(1)
    mixed = app.enqueue_many([task.options(durable=False).call(2), task.call(3)])
    assert app.get(one.id).args == (1,) and [j.args for j in mixed] == [(2,), (3,)]
    assert {j.id for j in reserve(backend, 10)} == {one.id, *(j.id for j in mixed)}
    with pytest.raises(ValueError, match="durable must be true or false"):
        task.options(durable="no")


# -- pausing a queue (issue 12) ---------------------------------------------------------


def test_paused_queue_takes_enqueues_but_leases_nothing(app, backend):
    assert app.pause("default") is True
    assert app.pause("default") is False  # already paused
    waiting = enqueue(app, 3)
    other = app.enqueue("noop", [9], queue="other")
    assert [j.id for j in reserve(backend, 10, queues=("default", "other"))] == [other.id]
    assert reserve(backend, 10) == []
    assert set(app.paused()) == {"default"}
    assert app.stats()["default"]["paused"] is True and app.stats()["default"]["queued"] == 3
    for _ in range(5):  # the enqueues' wake-ups (one per shard server) may each end a wait at once
        start = time.monotonic()
        backend.wait_for_work(["default"], 0.3)
        if time.monotonic() - start >= 0.25:
            break  # nothing is due in a paused queue: the wait blocks, no busy loop
    else:
        pytest.fail("wait_for_work kept returning at once for a paused queue")
    assert app.resume("default") is True
    assert app.resume("default") is False
    assert app.paused() == {}
    assert [j.id for j in reserve(backend, 10)] == [j.id for j in waiting]


def test_a_pause_is_kept_in_the_store(app, backend, store_url):
    if store_url.startswith("memory"):
        pytest.skip("memory:// lives in one App")
    app.pause("reports")
    assert "reports" in app.stats() and app.stats()["reports"]["paused"] is True  # listed before any job
    job = app.enqueue("noop", [0], queue="reports")
    other = deferq.App(store_url, lease=5)  # a restarted process: a new App on the same store
    try:
        assert set(other.paused()) == {"reports"}
        assert reserve(other.backend, queues=("reports",)) == []
        assert other.resume("reports") is True
    finally:
        other.close()
    assert [j.id for j in reserve(backend, queues=("reports",))] == [job.id]


def test_resume_wakes_a_waiting_worker(app, backend):
    app.pause("default")
    app.enqueue("noop", [0])
    timer = threading.Timer(0.2, lambda: app.resume("default"))
    start = time.monotonic()
    timer.start()
    try:
        backend.wait_for_work(["default"], 4.0)
    finally:
        timer.join()
    assert time.monotonic() - start < 3.0
    assert len(reserve(backend)) == 1


def test_a_bad_queue_name_is_refused_by_pause(app):
    with pytest.raises(deferq.ConfigError, match="queue name"):
        app.pause("two words")


# -- the job record: updated_at, remark, last_worker (S1-3) ------------------------------


def test_job_record_keeps_remark_update_time_and_last_worker(app, backend):
    task = app.task(name="noop")(lambda i: i)
    job = task.options(remark="asked by support, ticket 42").enqueue(0)
    stored = app.get(job.id)
    assert stored.remark == "asked by support, ticket 42" and stored.last_worker is None
    assert stored.updated_at == pytest.approx(stored.created_at, abs=0.01)
    leased = reserve(backend)[0]
    running = app.get(job.id)
    assert running.last_worker == WORKER == running.worker and leased.last_worker == WORKER
    assert running.updated_at >= stored.updated_at
    assert backend.settle([Outcome(leased, "succeeded")]) == [True]
    done = app.get(job.id)
    assert done.worker is None and done.last_worker == WORKER  # kept after it ends
    assert done.updated_at == pytest.approx(done.finished_at, abs=0.01)
    assert app.set_remark(job.id, "refunded") is True
    assert app.get(job.id).remark == "refunded" and app.get(job.id).updated_at >= done.updated_at
    assert app.set_remark(job.id, None) is True and app.get(job.id).remark is None
    assert app.set_remark("01NOSUCHJOB0000000000000000", "x") is False


def test_tags_are_kept_from_enqueue_through_lease_and_outcome(app, backend):
    task = app.task(name="tagged", tags=["billing"])(lambda i: i)
    plain, own = task.enqueue(0), task.options(tags=["billing", "customer:42", "ünïcode"]).enqueue(1)
    batch = app.enqueue_many([task.call(2)] * 3)  # a batch takes the task's tags too
    untagged = app.enqueue("noop", [0])
    assert app.get(plain.id).tags == ("billing",) and app.get(untagged.id).tags == ()
    assert app.get(own.id).tags == ("billing", "customer:42", "ünïcode")  # a job's own replace the task's
    assert {app.get(job.id).tags for job in batch} == {("billing",)}
    leased = {job.id: job for job in reserve(backend, limit=10)}
    assert leased[own.id].tags == ("billing", "customer:42", "ünïcode") and leased[untagged.id].tags == ()
    backend.settle([Outcome(leased[own.id], "succeeded")])
    assert app.get(own.id).tags == ("billing", "customer:42", "ünïcode")
    with pytest.raises(ValueError, match="tags must be up to 20 texts"):
        task.options(tags=["a,b"])


def test_every_state_change_moves_updated_at(app, backend):
    job = app.enqueue("noop", [0], max_attempts=1)
    times = [app.get(job.id).updated_at]
    leased = reserve(backend)[0]
    times.append(app.get(job.id).updated_at)
    backend.settle([Outcome(leased, "dead", error="boom")])
    times.append(app.get(job.id).updated_at)
    assert app.retry_dead(job.id)
    times.append(app.get(job.id).updated_at)
    assert app.cancel(job.id)
    times.append(app.get(job.id).updated_at)
    assert times == sorted(times) and None not in times
    assert app.get(job.id).last_worker == WORKER


def test_delete_removes_a_finished_job_only(app, backend):
    job = app.enqueue("noop", [0], key="k1", max_attempts=1)
    assert app.backend.delete(job.id) is False  # waiting: never deleted
    leased = reserve(backend)[0]
    assert backend.delete(job.id) is False  # running
    backend.settle([Outcome(leased, "dead", error="boom")])
    assert backend.delete(job.id) is True
    assert app.get(job.id) is None and backend.delete(job.id) is False
    assert app.stats().get("default", {}).get("dead", 0) == 0
    again = app.enqueue("noop", [1], key="k1")  # its key is free
    assert again.id != job.id and app.get_by_key("k1").id == again.id


# -- rate limits: the store hands out turns (limits.py) ---------------------------------------


def test_rate_turns_are_an_interval_apart_and_never_before_now(backend):
    turns = [backend.rate_take("sms", 0.5) for _ in range(4)]
    first, now = turns[0]
    assert first == pytest.approx(now, abs=0.01)  # a free limit: the turn is now
    assert [round(t - first, 3) for t, _ in turns] == [0.0, 0.5, 1.0, 1.5]
    assert all(t >= at for t, at in turns)
    other, at = backend.rate_take("customer:7", 0.5)  # each key on its own
    assert other == pytest.approx(at, abs=0.01)


def test_rate_turns_from_many_threads_never_share_a_turn(backend):
    got: list[float] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(10):
            turn, _ = backend.rate_take("shared", 0.01)
            with lock:
                got.append(turn)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    got.sort()
    assert len(got) == 40
    assert min(b - a for a, b in zip(got, got[1:])) >= 0.01 - 1e-6  # atomic: never the same turn twice


# -- concurrency limits: slots held by runs (limits.py) -------------------------------------------


def test_slots_are_taken_up_to_the_limit_dropped_and_released(backend):
    assert backend.slot_holders("sync:1") == {}
    assert backend.slot_take("sync:1", 2, "a:1") and backend.slot_take("sync:1", 2, "b:1")
    assert backend.slot_take("sync:1", 2, "a:1")  # a holder asking again keeps its slot
    assert not backend.slot_take("sync:1", 2, "c:1")
    assert list(backend.slot_holders("sync:1")) == ["a:1", "b:1"]
    assert backend.slot_take("sync:1", 2, "c:1", drop=["a:1"])  # a run that is over drops out
    backend.slot_release("sync:1", "b:1")
    backend.slot_release("sync:1", "never-held:1")
    assert list(backend.slot_holders("sync:1")) == ["c:1"]
    assert backend.slot_take("other", 1, "a:1")  # each key on its own


def test_each_slot_granted_gets_a_larger_fence(backend):
    first = backend.slot_take("fenced", 1, "a:1")
    assert first >= 1 and backend.slot_take("fenced", 1, "a:1") == first  # asking again: the same fence
    assert backend.slot_take("fenced", 1, "b:1") == 0  # all taken: no fence
    second = backend.slot_take("fenced", 1, "a:2", drop=["a:1"])  # the run of a:1 was declared over
    assert second > first
    assert backend.slot_holders("fenced") == {"a:2": second}  # a:1 can tell it lost its slot
    backend.slot_release("fenced", "a:2")
    assert backend.slot_take("fenced", 1, "b:1") > second  # released and granted again: larger still
    assert backend.slot_take("other-fenced", 1, "a:1") >= 1  # each key counts on its own


def test_slots_from_many_threads_never_exceed_the_limit(backend):
    won: list[str] = []
    lock = threading.Lock()

    def take(n: int) -> None:
        for i in range(5):
            holder = f"t{n}-{i}:1"
            if backend.slot_take("shared", 3, holder):
                with lock:
                    won.append(holder)

    threads = [threading.Thread(target=take, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(won) == 3 and sorted(backend.slot_holders("shared")) == sorted(won)
