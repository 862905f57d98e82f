"""Durable steps on every store: a finished step never runs again, a sleep or a wait
leaves the worker (the job is stored again, its attempt not counted), an event wakes
exactly the jobs waiting for its (event, key), and a stale attempt keeps no result."""

from __future__ import annotations

import asyncio
import time

import pytest

import deferq
from deferq.backends.base import Outcome, OutcomeKind
from deferq.context import JobControl, RunningJob
from deferq.job import JobState
from deferq.steps.checkpoints import JobSteps, LeaseLost, Suspend
from deferq.steps.events import send_event, timeline
from deferq.testing import run_here

ORDER = (0, 1, 2)


def run_next(app: deferq.App, timeout: float = 5.0) -> deferq.Job:
    """Lease the next job as soon as it is due (bounded), run it here, return it as stored."""
    deadline = time.monotonic() + timeout
    while not (leased := app.backend.reserve(["default"], 1, "w", app.lease, ORDER)):
        assert time.monotonic() < deadline, "no job came due in time"
        app.backend.wait_for_work(["default"], 0.05)
    run_here(app, leased[0])
    found = app.get(leased[0].id)
    assert found is not None
    return found


def test_a_finished_step_is_not_run_again_after_a_sleep(app: deferq.App) -> None:
    calls: list[str] = []

    @app.task(name="onboard")
    def onboard(user: int) -> str:
        job = deferq.current_job()
        assert job is not None
        first = job.step("welcome", lambda u: calls.append(f"welcome {u}") or u * 2, user)
        job.sleep("nap", 0.3)
        second = job.step("nudge", lambda: calls.append("nudge") or "nudged")
        return f"{first} {second}"

    stored = onboard.enqueue(21)
    slept = run_next(app)
    assert slept.state == JobState.SCHEDULED and slept.attempts == 0  # the sleep is no attempt
    assert slept.run_at >= app.backend.now() + 0.1
    assert calls == ["welcome 21"]
    done = run_next(app)
    assert done.state == JobState.SUCCEEDED and done.result == "42 nudged"
    assert calls == ["welcome 21", "nudge"]
    assert [(row["name"], row["kind"], row["state"]) for row in timeline(app.backend, stored.id)] == [
        ("welcome", "step", "done"), ("nap", "sleep", "done"), ("nudge", "step", "done")]


def test_jobs_sleeping_until_one_moment_are_due_then_and_resume_in_enqueue_order(app: deferq.App) -> None:
    """A sleep's end is stored as the moment itself (not the settle's now plus what was
    left), so jobs sleeping until one moment resume in the order they were enqueued."""
    moment = round(app.backend.now() + 0.4, 3)
    ran: list[int] = []

    @app.task(name="alarm")
    def alarm(n: int) -> None:
        job = deferq.current_job()
        assert job is not None
        job.sleep_until("alarm", moment)
        ran.append(n)

    for n in range(3):
        alarm.enqueue(n)
    slept = [run_next(app) for _ in range(3)]
    assert [job.run_at for job in slept] == [moment] * 3
    # claimed once the moment has passed: sharded stores ask their servers one after
    # another, and one asked a moment before another would not yet offer its job
    while app.backend.now() < moment:
        time.sleep(0.01)
    for _ in range(3):
        run_next(app)
    assert ran == [0, 1, 2]


def test_a_resumed_job_reads_no_checkpoints_of_its_own(app: deferq.App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoints come with the claimed job: none for a job never leased before, the
    stored ones for a job that slept (one batched read per claim); its run reads none."""
    calls: list[str] = []
    reads: list[str] = []

    @app.task(name="resumed")
    def resumed() -> str:
        job = deferq.current_job()
        assert job is not None
        first = job.step("first", lambda: calls.append("first") or "a")
        job.sleep("nap", 0.2)
        return first + job.step("second", lambda: calls.append("second") or "b")

    resumed.enqueue()
    read_one = app.backend.kv_list
    monkeypatch.setattr(app.backend, "kv_list", lambda namespace: reads.append(namespace) or read_one(namespace))
    assert run_next(app).state == JobState.SCHEDULED
    done = run_next(app)
    assert done.state == JobState.SUCCEEDED and done.result == "ab"
    assert calls == ["first", "second"] and [ns for ns in reads if ns.startswith("deferq.steps:")] == []


def test_a_failing_step_retries_without_redoing_the_steps_before_it(app: deferq.App) -> None:
    calls: list[str] = []

    @app.task(name="flaky", max_attempts=3, backoff=deferq.backoff.fixed(0))
    def flaky() -> int:
        job = deferq.current_job()
        assert job is not None
        job.step("charge", calls.append, "charge")
        return job.step("confirm", confirm)

    def confirm() -> int:
        calls.append("confirm")
        if calls.count("confirm") < 2:
            raise RuntimeError("downstream not ready")
        return 7

    flaky.enqueue()
    assert run_next(app).state == JobState.QUEUED  # retried at once
    assert run_next(app).result == 7
    assert calls == ["charge", "confirm", "confirm"]


def test_an_event_wakes_its_waiters_only(app: deferq.App) -> None:
    @app.task(name="checkout")
    def checkout(user: int) -> object:
        job = deferq.current_job()
        assert job is not None
        return job.wait_for("paid", event="payment", key=f"user:{user}", timeout=600)

    waiting, other = checkout.enqueue(1), checkout.enqueue(2)
    assert run_next(app).state == JobState.SCHEDULED
    assert run_next(app).state == JobState.SCHEDULED
    assert app.get(waiting.id).run_at > app.backend.now() + 500  # due at its timeout
    assert send_event(app.backend, "payment", "user:1", {"amount": 10}) == 1
    done = run_next(app, timeout=2)
    assert (done.id, done.state, done.result) == (waiting.id, JobState.SUCCEEDED, {"amount": 10})
    assert app.get(other.id).state == JobState.SCHEDULED
    assert [row["state"] for row in timeline(app.backend, other.id)] == ["waiting"]


def test_an_event_that_comes_while_its_waiter_is_being_settled_wakes_it_at_once(app: deferq.App) -> None:
    """The sender's wake finds the job still running (it has registered as a waiter and
    not yet been stored as waiting): the job must not sleep to its wait's timeout."""

    @app.task(name="pay")
    def pay(user: int) -> object:
        job = deferq.current_job()
        assert job is not None
        try:
            return job.wait_for("paid", event="payment", key=f"user:{user}", timeout=600)
        except Suspend:  # on its way to the settle: the event comes now
            assert send_event(app.backend, "payment", f"user:{user}", "paid") == 0  # found nobody waiting yet
            raise

    job = pay.enqueue(7)
    suspended = run_next(app)
    assert suspended.state == JobState.QUEUED  # due now, not in 600 s
    done = run_next(app, timeout=2)
    assert (done.id, done.state, done.result) == (job.id, JobState.SUCCEEDED, "paid")


def test_an_event_sent_before_the_wait_is_kept_and_consumed_once(app: deferq.App) -> None:
    @app.task(name="twice")
    def twice() -> list[object]:
        job = deferq.current_job()
        assert job is not None
        first = job.wait_for("first", event="answer", key="k", timeout=0.3)
        second = job.wait_for("second", event="answer", key="k", timeout=0.3)
        return [first, second]

    twice.enqueue()
    assert send_event(app.backend, "answer", "k", "yes") == 0  # nobody waits yet: kept
    assert run_next(app).state == JobState.SCHEDULED  # first answered at once; second waits
    done = run_next(app)
    assert done.result == ["yes", None]  # the same event is not had twice: the second times out
    assert [row["state"] for row in timeline(app.backend, done.id)] == ["done", "timed out"]


def test_a_stale_attempt_keeps_no_step_result_and_runs_no_step(app: deferq.App, caplog) -> None:
    """An attempt whose lease another attempt took (a worker frozen past its lease) runs
    no step's function, sync or async: it checks its lease first, and says so."""
    job = app.enqueue("stale")
    old = app.backend.reserve(["default"], 1, "old", 0.2, ORDER)[0]
    deadline = time.monotonic() + 5
    while not app.backend.recover_expired():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    new = app.backend.reserve(["default"], 1, "new", 5, ORDER)[0]
    assert new.id == job.id and new.attempts == 2
    ran: list[str] = []
    stale = JobSteps(app.backend, 5, 3600, old)
    with pytest.raises(LeaseLost):
        stale.step("pay", lambda: ran.append("sync") or "stale", (), {})
    running = RunningJob(old, JobControl(steps_for=lambda j: JobSteps(app.backend, 5, 3600, j)))
    with pytest.raises(LeaseLost):
        asyncio.run(running.step_async("pay", lambda: ran.append("async") or "stale"))
    assert ran == []
    assert f"job {job.id} (stale) attempt 1 lost its lease before step 'pay'" in caplog.text
    assert JobSteps(app.backend, 5, 3600, new).step("pay", lambda: "fresh", (), {}) == "fresh"
    assert JobSteps(app.backend, 5, 3600, new).step("pay", lambda: "again", (), {}) == "fresh"


def test_reordered_steps_end_the_job_dead_with_a_sentence(app: deferq.App) -> None:
    version = {"n": 1}

    @app.task(name="reorder")
    def reorder() -> None:
        job = deferq.current_job()
        assert job is not None
        names = ["a", "b"] if version["n"] == 1 else ["b", "a"]
        for name in names:
            job.step(name, str, name)
        job.sleep("nap", 0.2)

    reorder.enqueue()
    assert run_next(app).state == JobState.SCHEDULED
    version["n"] = 2
    dead = run_next(app)
    assert dead.state == JobState.DEAD and "reordered" in (dead.error or "")


def test_wake_makes_only_a_scheduled_job_due(app: deferq.App, backend) -> None:
    later = app.enqueue("noop", delay=600)
    now = app.enqueue("noop")
    assert backend.wake(later.id) and app.get(later.id).state == JobState.QUEUED
    assert not backend.wake(now.id) and not backend.wake("0" * 26)
    leased = backend.reserve(["default"], 2, "w", 5, ORDER)
    assert len(leased) == 2 and not backend.wake(later.id)
    backend.settle([Outcome(job, OutcomeKind.SUCCEEDED) for job in leased])
    assert not backend.wake(later.id)


def test_a_namespace_expires_at_once(backend) -> None:
    backend.kv_put("steps-test", "a", b"1")
    backend.kv_put("steps-test", "b", b"2", ttl=3600)
    backend.kv_put("steps-other", "a", b"3")
    assert backend.kv_expire("steps-test", 3600) == 2
    assert backend.kv_list("steps-test") == {"a": b"1", "b": b"2"}
    assert backend.kv_expire("steps-test", 0.05) == 2
    deadline = time.monotonic() + 5
    while backend.kv_list("steps-test"):
        assert time.monotonic() < deadline, "the records did not expire"
        time.sleep(0.02)
    assert backend.kv_list("steps-other") == {"a": b"3"}


def test_waiting_jobs_are_marked_and_listed_without_reading_their_steps(app: deferq.App) -> None:
    @app.task(name="waits")
    def waits() -> object:
        job = deferq.current_job()
        assert job is not None
        answer = job.wait_for("paid", event="paid", key="k1", timeout=600)
        job.sleep("after", 600)
        return answer

    @app.task(name="sleeps")
    def sleeps() -> None:
        job = deferq.current_job()
        assert job is not None
        job.sleep("nap", 600)

    waiter, sleeper, plain = waits.enqueue(), sleeps.enqueue(), app.enqueue("noop", delay=600)
    assert run_next(app).state == JobState.SCHEDULED and run_next(app).state == JobState.SCHEDULED
    stored = app.get(waiter.id)
    assert stored is not None and stored.waits_for == "paid\tk1" and stored.waiting
    assert {job.id: job.waiting for job in (app.get(sleeper.id), app.get(plain.id)) if job} == {
        sleeper.id: False, plain.id: False}
    assert [job.id for job in app.find_jobs(state="waiting").jobs] == [waiter.id]
    assert {job.id for job in app.find_jobs(state="scheduled").jobs} == {waiter.id, sleeper.id, plain.id}
    assert send_event(app.backend, "paid", "k1", 5) == 1
    assert run_next(app).state == JobState.SCHEDULED  # its answer taken, now asleep: no longer waiting
    resumed = app.get(waiter.id)
    assert resumed is not None and resumed.waits_for is None and not resumed.waiting
    assert app.find_jobs(state="waiting").jobs == []


def test_a_job_that_waited_and_then_succeeded_waits_for_nothing(app: deferq.App, backend) -> None:
    """Its event came (woken), it ran again and returned nothing: the settle of a success
    clears what it waited for, as every other settle does."""
    job = app.enqueue("noop")
    [leased] = backend.reserve(["default"], 1, "w", 60, ORDER)
    assert backend.settle([Outcome(leased, "snooze", delay=600, waits_for="paid\tk1")]) == [True]
    assert backend.wake(job.id)
    [again] = backend.reserve(["default"], 1, "w", 60, ORDER)
    assert backend.settle([Outcome(again, "succeeded")]) == [True]
    done = backend.get(job.id)
    assert done is not None and done.state == JobState.SUCCEEDED
    assert done.waits_for is None


def test_a_leased_record_is_stored_once_and_only_by_the_holder(app: deferq.App, backend) -> None:
    app.enqueue("leased")
    [job] = backend.reserve(["default"], 1, "w", 5, ORDER)
    assert backend.kv_put_leased(job, 5, "leased-test", "a", b"1") == (True, None)
    assert backend.kv_put_leased(job, 5, "leased-test", "a", b"2") == (True, b"1")  # the first one wins
    other = job.evolve(worker="someone else")
    assert backend.kv_put_leased(other, 5, "leased-test", "b", b"3") == (False, None)
    stale = job.evolve(attempts=job.attempts + 1)
    assert backend.kv_put_leased(stale, 5, "leased-test", "b", b"3") == (False, None)
    backend.kv_put("leased-test", "c", b"old", ttl=0.05)
    deadline = time.monotonic() + 5
    while backend.kv_get("leased-test", "c") is not None:  # an expired record is replaced
        assert time.monotonic() < deadline, "the record did not expire"
        time.sleep(0.02)
    assert backend.kv_put_leased(job, 5, "leased-test", "c", b"new") == (True, None)
    assert backend.kv_list("leased-test") == {"a": b"1", "c": b"new"}
    backend.settle([Outcome(job, OutcomeKind.SUCCEEDED)])
    assert backend.kv_put_leased(job, 5, "leased-test", "d", b"4") == (False, None)  # it ended
    assert backend.kv_expire_many(["leased-test", "leased-none"], 0.05) == 2
    while backend.kv_list("leased-test"):
        assert time.monotonic() < deadline, "the records did not expire"
        time.sleep(0.02)
    assert backend.kv_expire_many([], 1) == 0


def test_batches_wake_write_and_delete_many_at_once(app: deferq.App, backend) -> None:
    later = [app.enqueue("noop", delay=600, queue=queue) for queue in ("default", "other", "default")]
    due = app.enqueue("noop")
    assert backend.wake_many([job.id for job in later] + [due.id, "0" * 26]) == 3
    assert {app.get(job.id).state for job in later} == {JobState.QUEUED}
    assert backend.wake_many([]) == 0 and backend.wake_many([later[0].id]) == 0
    assert backend.kv_put_many([("batch-a", "x", b"1"), ("batch-b", "y", b"2")]) == 2
    assert backend.kv_put_many([("batch-a", "x", b"3"), ("batch-a", "z", b"4")], only_new=True) == 1
    assert backend.kv_list("batch-a") == {"x": b"1", "z": b"4"} and backend.kv_get("batch-b", "y") == b"2"
    assert backend.kv_delete_many("batch-a", ["x", "z", "gone"]) == 2 and backend.kv_list("batch-a") == {}
    assert backend.kv_delete_many("batch-a", []) == 0


def test_one_event_wakes_many_waiters_in_a_few_calls(app: deferq.App) -> None:
    @app.task(name="many")
    def many() -> object:
        job = deferq.current_job()
        assert job is not None
        return job.wait_for("go", event="go", key="all", timeout=600)

    jobs = [many.enqueue() for _ in range(5)]
    for _ in jobs:
        assert run_next(app).state == JobState.SCHEDULED
    assert send_event(app.backend, "go", "all", 7) == 5
    assert sorted(run_next(app).result for _ in jobs) == [7] * 5
    assert app.backend.kv_list("deferq.waiters:go\tall") == {}


def test_a_step_with_retries_of_its_own_leaves_the_worker_between_tries(app: deferq.App) -> None:
    calls: list[int] = []

    @app.task(name="retried-step", max_attempts=1)
    def retried() -> int:
        job = deferq.current_job()
        assert job is not None

        def charge() -> int:
            calls.append(1)
            if len(calls) < 2:
                raise TimeoutError("no answer")
            return len(calls)

        return job.step_with_retry("charge", deferq.StepRetry(3, deferq.backoff.fixed(0.2)), charge)

    retried.enqueue()
    waiting = run_next(app)
    assert waiting.state == JobState.SCHEDULED and waiting.attempts == 0
    assert [(s["state"], s["failures"]) for s in timeline(app.backend, waiting.id)] == [("retrying", 1)]
    done = run_next(app)
    assert done.result == 2 and [s["failures"] for s in timeline(app.backend, done.id)] == [1]
