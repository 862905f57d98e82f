"""deferq.testing and the pytest plugin, used the way a project's own tests would."""

from __future__ import annotations

import pytest

import deferq
from deferq import testing

project = deferq.App("sqlite:///never-opened-by-these-tests.db")  # a project's app, tasks and all
sent: list[tuple[int, str]] = []


@project.task(max_attempts=3, backoff=deferq.backoff.fixed(60))
def send(user_id: int, email: str) -> str:
    if not sent and email == "flaky@x":
        sent.append((0, "failed once"))
        raise RuntimeError("smtp down")
    sent.append((user_id, email))
    return f"sent to {email}"


@pytest.fixture
def app(deferq_isolate):
    sent.clear()
    return deferq_isolate(project)


def test_drain_runs_due_jobs_here_and_assertions_see_what_was_enqueued(app, deferq_drain):
    job = send.enqueue(1, "a@x")
    later = send.options(delay=3600).enqueue(2, "b@x")
    assert testing.assert_enqueued(app, send, 1, "a@x").id == job.id
    assert [j.id for j in testing.enqueued(app, "send")] == [job.id, later.id]
    with pytest.raises(AssertionError, match="waiting: send"):
        testing.assert_enqueued(app, send, 3, "c@x")

    assert [j.result for j in deferq_drain(app)] == ["sent to a@x"]
    assert app.get(later.id).state == "scheduled"  # not due: drain leaves it

    testing.travel(app, 3600)
    assert [j.id for j in deferq_drain(app)] == [later.id] and sent == [(1, "a@x"), (2, "b@x")]


def test_time_travel_runs_retries_with_their_backoff(app, deferq_drain):
    job = send.enqueue(7, "flaky@x")
    assert deferq_drain(app)[0].state == "scheduled"  # failed once; retry in 60 s
    testing.travel(app, 59)
    assert deferq_drain(app) == []
    testing.travel(app, 2)
    assert [j.state for j in deferq_drain(app)] == ["succeeded"] and app.get(job.id).attempts == 2


def test_arguments_arrive_as_a_worker_would_see_them(app, deferq_drain):
    seen = []

    @project.task(name="keep_args")
    def keep(values, when):
        seen.append((values, when))

    keep.enqueue((1, 2), when="2030-01-01")
    deferq_drain(app)
    assert seen == [([1, 2], "2030-01-01")]  # a tuple arrives as a list: JSON, as in production


def test_drain_and_eager_mode_pass_each_step_the_results_before_it(deferq_drain):
    """A chain's step gets the step before's result and a chord's callback the list of
    its members', as from a worker: under drain and in eager mode alike."""
    for eager in (False, True):
        app = deferq.App("memory://", eager=eager)

        @app.task()
        def add_one(x: int) -> int:
            return x + 1

        @app.task()
        def times(y: int, k: int = 10) -> int:
            return y * k

        @app.task()
        def total(values: list[int]) -> int:
            return sum(values)

        steps = deferq.chain(add_one.call(1), times.partial(k=100)).enqueue()
        members = deferq.chord([add_one.call(1), add_one.call(2)], total.partial()).enqueue()
        deferq_drain(app)
        assert (steps.wait(timeout=5), members.wait(timeout=5)) == (200, 5), f"eager={eager}"


def test_eager_mode_decodes_arguments_like_production():
    app = deferq.App("memory://", eager=True)

    @app.task()
    def kind(value):
        return type(value).__name__

    assert kind.enqueue((1, 2)).result == "list"


def test_time_travel_needs_memory(tmp_path):
    app = deferq.App(f"sqlite:///{tmp_path}/t.db")
    with pytest.raises(deferq.ConfigError, match="memory://"):
        testing.travel(app, 5)
    app.close()


def test_deferq_app_fixture_is_a_fresh_memory_app(deferq_app):
    assert deferq_app.url == "memory://" and deferq_app.stats() == {}


def test_eager_mode_keeps_a_tasks_progress():
    eager = deferq.App("memory://", eager=True)

    @eager.task()
    def count(n: int) -> int:
        for i in range(n):
            deferq.current_job().progress((i + 1) / n, f"{i + 1} of {n}")
        return n

    job = count.enqueue(1000)
    assert (job.state, job.result, job.progress, job.progress_message) == ("succeeded", 1000, 1.0, "1000 of 1000")

