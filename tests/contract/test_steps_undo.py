"""Compensation on every store: when a durable job ends dead or is cancelled, the undo
handlers of its finished steps run in reverse order, each once, their outcomes on its
timeline; a compensation cut short (the worker gone) goes on where it stopped."""

from __future__ import annotations

import pytest

import deferq
from deferq import testing
from deferq.backends.base import Outcome, OutcomeKind
from deferq.job import JobState
from deferq.steps.undo import PENDING, resume_compensations
from deferq.testing import run_here


class Trip:
    """A task booking three things, each with its undo, and what ran, in order."""

    def __init__(self, app: deferq.App, name: str) -> None:
        self.log: list[str] = []
        self.crash_on: str | None = None  # an undo that stops its process (as a SIGKILL would)
        self.fail_on: str | None = None  # an undo that raises

        def book(what: str) -> str:
            self.log.append(f"book {what}")
            return f"#{what}"

        def unbook(booking: str) -> None:
            self.log.append(f"unbook {booking}")
            if booking == self.crash_on:
                raise SystemExit("the worker is gone")
            if booking == self.fail_on:
                raise RuntimeError("the car desk is closed")

        @app.task(name=name, max_attempts=1)
        def trip(ending: str) -> str:
            job = deferq.current_job()
            assert job is not None
            for what in ("hotel", "car"):
                job.step_with_undo(what, unbook, book, what)
            job.step("note", self.log.append, "note")  # no undo: nothing to undo
            job.step("flight", book, "flight", undo=unbook)
            if ending == "sleep":
                job.sleep("nap", 3600)
            elif ending == "fail":
                raise RuntimeError("the payment was declined")
            return "booked"

        self.task = trip


def stored(app: deferq.App, job: deferq.Job) -> deferq.Job:
    found = app.get(job.id)
    assert found is not None
    return found


BOOKED = ["book hotel", "book car", "note", "book flight"]
UNBOOKED = ["unbook #flight", "unbook #car", "unbook #hotel"]


def test_a_dead_job_runs_its_undo_handlers_in_reverse_once_each(app: deferq.App) -> None:
    trip = Trip(app, "trip-dead")
    job = trip.task.enqueue("fail")
    testing.drain(app)
    ended = stored(app, job)
    assert ended.state == JobState.DEAD and "the payment was declined" in (ended.error or "")
    assert trip.log == BOOKED + UNBOOKED
    rows = {row["name"]: row for row in app.steps(job.id)}
    assert rows["flight"]["undone"]["state"] == "done" and rows["flight"]["undo"].endswith("unbook")
    assert "undo" not in rows["note"]
    assert app.backend.kv_list(PENDING) == {}


def test_a_job_that_succeeds_or_retries_runs_no_undo(app: deferq.App) -> None:
    trip = Trip(app, "trip-ok")
    job = trip.task.enqueue("ok")
    testing.drain(app)
    assert stored(app, job).state == JobState.SUCCEEDED and trip.log == BOOKED


def test_a_job_cancelled_while_it_sleeps_runs_them_then_ends_cancelled(app: deferq.App) -> None:
    trip = Trip(app, "trip-cancel")
    job = trip.task.enqueue("sleep")
    testing.drain(app)
    assert stored(app, job).state == JobState.SCHEDULED
    assert app.cancel(job.id)
    testing.drain(app)  # it was queued again to run its handlers
    assert stored(app, job).state == JobState.CANCELLED
    assert trip.log == BOOKED + UNBOOKED  # no new step ran: the sleep ended nothing
    assert app.backend.kv_list(PENDING) == {}


def test_a_failing_undo_is_kept_failed_and_the_others_still_run(app: deferq.App) -> None:
    trip = Trip(app, "trip-failing-undo")
    trip.fail_on = "#car"
    job = trip.task.enqueue("fail")
    testing.drain(app)
    assert stored(app, job).state == JobState.DEAD and trip.log == BOOKED + UNBOOKED
    car = next(row for row in app.steps(job.id) if row["name"] == "car")
    assert car["undone"]["state"] == "failed" and "the car desk is closed" in car["undone"]["error"]


def test_a_compensation_cut_short_goes_on_without_rerunning_a_finished_undo(app: deferq.App) -> None:
    """The worker is gone inside the second handler (SystemExit stands for SIGKILL); its
    lease lapses and the job ends dead; a worker's sweep queues it again; the first
    handler does not run again, the second runs again (it was cut short), then the third."""
    trip = Trip(app, "trip-crash")
    trip.crash_on = "#car"
    job = trip.task.enqueue("fail")
    [leased] = app.backend.reserve(["default"], 1, "w", app.lease, (0, 1, 2))
    with pytest.raises(SystemExit):
        run_here(app, leased)
    assert stored(app, job).state == JobState.ACTIVE
    lapsed = Outcome(leased, OutcomeKind.DEAD, error="lease expired")  # what recovery makes of it
    assert app.backend.settle([lapsed]) == [True]
    assert list(app.backend.kv_list(PENDING)) == [job.id]
    trip.crash_on = None
    assert resume_compensations(app.backend) == 1
    testing.drain(app)
    ended = stored(app, job)
    assert ended.state == JobState.DEAD and "the payment was declined" in (ended.error or "")
    assert trip.log == BOOKED + ["unbook #flight", "unbook #car", "unbook #car", "unbook #hotel"]
    assert app.backend.kv_list(PENDING) == {}
    assert resume_compensations(app.backend) == 0


def test_retry_from_after_compensation_starts_it_over(app: deferq.App) -> None:
    trip = Trip(app, "trip-retry")
    job = trip.task.enqueue("fail")
    testing.drain(app)
    trip.log.clear()
    app.retry_from(job.id, "hotel")
    testing.drain(app)
    assert trip.log == BOOKED + UNBOOKED and stored(app, job).state == JobState.DEAD


def test_an_undo_handler_must_be_a_plain_function(app: deferq.App) -> None:
    async def later(result: object) -> None:
        return None

    @app.task(name="bad-undo", max_attempts=1)
    def bad() -> None:
        job = deferq.current_job()
        assert job is not None
        job.step_with_undo("s", later, str, 1)  # type: ignore[arg-type]

    job = bad.enqueue()
    testing.drain(app)
    assert "an undo handler must be a plain function" in (stored(app, job).error or "")
