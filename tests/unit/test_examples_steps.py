"""examples/durable_steps: the three delayed-job cases of a delay-queue service (a
reminder three days before expiry, a check five minutes after payment, a re-notify at
1, 3, 5 and 7 minutes that stops at an answer), run with deferq.testing's time travel."""

from __future__ import annotations

import pytest

import deferq
from deferq import testing
from deferq.job import JobState
from tests.unit.test_contrib_web import load_example

DAY = 86400.0


@pytest.fixture
def example(monkeypatch):
    monkeypatch.setenv("DEFERQ_URL", "memory://")
    module = load_example("durable_steps/tasks.py")
    yield module
    module.app.close()


def job_now(app: deferq.App, job: deferq.Job) -> deferq.Job:
    found = app.get(job.id)
    assert found is not None
    return found


def later(app: deferq.App, seconds: float) -> None:
    testing.travel(app, seconds)
    testing.drain(app)


def test_the_membership_reminder_comes_three_days_before_expiry(example):
    app = example.app
    job = example.remind_before_expiry.enqueue(7, app.backend.now() + 10 * DAY)
    testing.drain(app)
    assert example.outbox == [] and job_now(app, job).state == JobState.SCHEDULED
    later(app, 7 * DAY - 60)
    assert example.outbox == []
    later(app, 61)
    assert example.outbox == ["member 7: your membership ends in 3 days"]
    assert job_now(app, job).state == JobState.SUCCEEDED


def test_a_membership_that_ends_within_three_days_is_reminded_at_once(example):
    job = example.remind_before_expiry.enqueue(8, example.app.backend.now() + DAY)
    testing.drain(example.app)
    assert example.outbox == ["member 8: your membership ends in 3 days"]
    assert job_now(example.app, job).state == JobState.SUCCEEDED


@pytest.mark.parametrize(("downstream", "alerts"), [
    ("paid", []), ("pending", ["order 3: paid five minutes ago, downstream says pending"]),
])
def test_the_payment_is_checked_five_minutes_later(example, monkeypatch, downstream, alerts):
    checked: list[int] = []

    def payment_state(order: int) -> str:
        checked.append(order)
        return downstream

    monkeypatch.setattr(example, "payment_state", payment_state)
    app = example.app
    job = example.check_payment.enqueue(3)
    testing.drain(app)
    later(app, 299)
    assert checked == []
    later(app, 2)
    assert checked == [3] and example.outbox == alerts
    assert job_now(app, job).result == downstream


def test_renotify_stops_when_the_other_side_answers(example):
    app = example.app
    job = example.renotify.enqueue(9)
    testing.drain(app)
    later(app, 60)
    later(app, 120)  # notified at once, at 1 and at 3 minutes
    assert example.outbox == ["ticket 9: please answer", "ticket 9: please answer (1 min)",
                              "ticket 9: please answer (3 min)"]
    assert app.send_event("answered", "9", "on it") == 1
    testing.drain(app)
    assert len(example.outbox) == 3 and job_now(app, job).result == "answered: on it"
    states = [(row["name"], row["state"]) for row in app.steps(job.id)]
    assert states == [("notify", "done"), ("answer before 1", "timed out"), ("notify at 1", "done"),
                      ("answer before 3", "timed out"), ("notify at 3", "done"), ("answer before 5", "done")]


def test_renotify_gives_up_after_seven_minutes(example):
    app = example.app
    job = example.renotify.enqueue(4)
    testing.drain(app)
    for gap in (60, 120, 120, 120):
        later(app, gap)
    assert [message.rpartition("(")[2] for message in example.outbox[1:]] == ["1 min)", "3 min)", "5 min)",
                                                                               "7 min)"]
    assert job_now(app, job).result == "no answer"
