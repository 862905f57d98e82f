"""Delays from outside are finite and capped (values.py): a producer's delay or due time and
a durable sleep or wait beyond the caps are refused with a sentence; a delay a task raises
(Retry, Snooze, Backoff: often a called service's Retry-After) is clamped, with a warning."""

from __future__ import annotations

import logging
import math
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

import deferq
from deferq import testing
from deferq.attempt.runner import decide_failure
from deferq.backends.base import Outcome
from deferq.context import duration
from deferq.job import Job
from deferq.registry import TaskSpec
from deferq.values import MAX_DELAY, MAX_PAUSE, capped

# every float a called service or a computation can hand over, inf and NaN included
any_seconds = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([math.inf, math.nan, 1e300])
JOB = Job(id="01JOBFORDELAYS00000000000000", task="fetch", queue="default")
SPEC = TaskSpec(name="fetch", fn=lambda: None, backoff=lambda attempts: 42.0, max_attempts=5)


@given(any_seconds, st.sampled_from([MAX_DELAY, MAX_PAUSE]))
def test_capped_is_always_a_wait_a_store_can_keep(seconds, cap):
    wait = capped(seconds, cap)
    assert 0.0 <= wait <= cap
    if 0 <= seconds <= cap:
        assert wait == seconds  # a wait within the caps is kept as asked


@given(any_seconds, any_seconds)
def test_no_outcome_carries_a_wait_a_store_cannot_keep(delay, due):
    outcome = Outcome(JOB, "snooze", delay=delay, due=due)
    assert 0.0 <= outcome.delay <= MAX_DELAY
    assert outcome.due is not None and 0.0 <= outcome.due <= time.time() + MAX_DELAY


@given(any_seconds)
def test_a_raised_delay_becomes_a_finite_capped_outcome(seconds):
    for exc, cap in ((deferq.Retry(seconds), MAX_DELAY), (deferq.Snooze(seconds), MAX_DELAY),
                     (deferq.Backoff(seconds), MAX_PAUSE), (deferq.Backoff(retry_after=seconds), MAX_PAUSE),
                     (deferq.Backoff(retry_after=repr(seconds)), MAX_PAUSE)):
        outcome = decide_failure(SPEC, JOB, exc)
        assert 0.0 <= outcome.delay <= cap, (exc, outcome.delay)


@pytest.mark.parametrize("retry_after", ["inf", "1e400", "99999999999", 1e300, math.inf,
                                         format_datetime(datetime(9999, 12, 31, tzinfo=UTC), usegmt=True)])
def test_a_retry_after_of_millennia_pauses_seven_days_with_a_warning(retry_after, caplog):
    with caplog.at_level(logging.WARNING, "deferq"):
        outcome = decide_failure(SPEC, JOB, deferq.Backoff(retry_after=retry_after))
    assert outcome.kind == "snooze" and outcome.delay == MAX_PAUSE == 7 * 86400
    [line] = [r.getMessage() for r in caplog.records]
    assert JOB.id in line and "(fetch)" in line and "clamped to 604800 seconds (7 days)" in line


def test_a_retry_after_of_nan_is_unreadable_and_falls_back_to_seconds(caplog):
    assert decide_failure(SPEC, JOB, deferq.Backoff(12, retry_after="nan")).delay == 12
    assert decide_failure(SPEC, JOB, deferq.Backoff(12, retry_after=math.nan)).delay == 12
    assert decide_failure(SPEC, JOB, deferq.Backoff(12, retry_after="120")).delay == 120
    assert not caplog.records  # nothing clamped: nothing said


def test_a_retry_of_inf_waits_ten_years_and_one_of_nan_the_tasks_backoff(caplog):
    with caplog.at_level(logging.WARNING, "deferq"):
        assert decide_failure(SPEC, JOB, deferq.Retry(math.inf)).delay == MAX_DELAY
        assert decide_failure(SPEC, JOB, deferq.Snooze(1e300)).delay == MAX_DELAY
    assert len(caplog.records) == 2 and all("clamped" in r.getMessage() for r in caplog.records)
    assert decide_failure(SPEC, JOB, deferq.Retry(math.nan)).delay == 42.0  # as if none were asked


@pytest.mark.parametrize("value", [math.inf, math.nan, 1e300, MAX_DELAY + 1, timedelta(days=3651), -1])
def test_a_sleep_or_a_wait_beyond_ten_years_is_refused_with_a_sentence(value):
    with pytest.raises(deferq.ConfigError, match="must be") as refused:
        duration(value, "a sleep's delay")
    assert "\n" not in str(refused.value)
    assert duration(MAX_DELAY, "a sleep's delay") == MAX_DELAY


@pytest.mark.parametrize("when", [datetime(9999, 12, 31, tzinfo=UTC), 1e300, math.inf, math.nan,
                                  datetime.now(UTC) + timedelta(days=3660)])
def test_a_sleep_until_beyond_ten_years_is_refused_with_a_sentence(when):
    app = deferq.App("memory://")

    @app.task(max_attempts=1)
    def nap() -> None:
        running = deferq.current_job()
        assert running is not None
        running.sleep_until("nap", when)

    job = nap.enqueue()
    [ended] = testing.drain(app)
    assert ended.id == job.id and ended.state == "dead"  # not parked `scheduled` for ever
    assert "sleep_until's time must be" in (ended.error or "")


def test_a_sleep_within_ten_years_still_sleeps():
    app = deferq.App("memory://")

    @app.task()
    def nap() -> None:
        running = deferq.current_job()
        assert running is not None
        running.sleep_until("nap", datetime.now(UTC) + timedelta(days=3600))

    job = nap.enqueue()
    [ended] = testing.drain(app)
    assert ended.id == job.id and ended.state == "scheduled" and ended.run_at is not None


@pytest.mark.parametrize("options", [{"delay": math.inf}, {"delay": math.nan}, {"delay": 1e300},
                                     {"at": datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)}, {"at": math.inf}])
def test_an_enqueue_beyond_the_caps_is_refused_and_stores_nothing(options):
    app = deferq.App("memory://")
    with pytest.raises(ValueError, match="must be"):
        app.enqueue("noop", **options)
    assert testing.enqueued(app) == []
