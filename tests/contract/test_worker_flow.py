"""Flow control in a worker of this process, on every store: snoozing, progress,
cancelling a running job, expiry, and the limits a task sets."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime, timedelta

import pytest

import deferq
import deferq.worker
from deferq.job import JobState
from tests.conftest import STORES
from tests.contract.test_worker import start_worker, stop_worker, wait_for_state

# slow: each waits on real time (progress every half second, a cancel, an expiry), ~2 s a store
pytestmark = [pytest.mark.parametrize("store_url", STORES, indirect=True), pytest.mark.slow]


def run_until(app, job, *states, **config):
    """Run a worker until `job` is in one of `states`; the job as it is then."""
    worker, thread = start_worker(app, **config)
    try:
        return wait_for_state(app, job.id, *states)
    finally:
        stop_worker(worker, thread)


def test_a_task_that_snoozes_runs_again_without_spending_attempts(app):
    runs = []

    @app.task(max_attempts=1)
    def not_yet():
        runs.append(deferq.current_job().attempts)
        if len(runs) < 3:
            raise deferq.Snooze(0.1)
        return len(runs)

    done = run_until(app, not_yet.enqueue(), JobState.SUCCEEDED)
    assert runs == [1, 1, 1] and done.attempts == 1 and done.result == 3


def test_before_run_may_snooze_a_job(app):
    class NotBefore(deferq.Middleware):
        def __init__(self) -> None:
            self.asked = 0

        def before_run(self, job):
            self.asked += 1
            if self.asked == 1:
                raise deferq.Snooze(0.2)

    gate = NotBefore()
    app.add_middleware(gate)

    @app.task(max_attempts=1)
    def f():
        return "ran"

    done = run_until(app, f.enqueue(), JobState.SUCCEEDED)
    assert gate.asked == 2 and done.attempts == 1 and done.result == "ran"


def test_progress_is_stored_at_once_then_at_most_every_half_second(app):
    writes = []
    store = app.backend.record_progress

    def counted(jobs):
        writes.append(time.monotonic())
        return store(jobs)

    app.backend.record_progress = counted
    first_seen = []

    @app.task()
    def crunch():
        job = deferq.current_job()
        job.progress(0.0, "starting")
        time.sleep(0.25)
        first_seen.append(app.get(job.id).progress_message)  # the first report is stored at once
        start, n = time.monotonic(), 0
        while time.monotonic() - start < 1.2:  # a tight loop of reports
            n += 1
            job.progress(min(n / 1e7, 0.99), f"{n} done")
        job.progress(1.0, "all done")
        return n

    done = run_until(app, crunch.enqueue(), JobState.SUCCEEDED)
    assert first_seen == ["starting"]
    assert (done.progress, done.progress_message) == (1.0, "all done")  # the last report, before settling
    assert done.result > 1000 and 3 <= len(writes) <= 6
    assert all(b - a >= 0.45 for a, b in zip(writes, writes[1:-1]))  # the final one may come sooner


def test_an_async_task_reports_progress(app):
    @app.task()
    async def fetch():
        deferq.current_job().progress(0.5, "half")
        await asyncio.sleep(0.01)
        return deferq.current_job().attempts

    done = run_until(app, fetch.enqueue(), JobState.SUCCEEDED)
    assert (done.progress, done.progress_message, done.result) == (0.5, "half", 1)


def test_progress_refuses_what_is_not_a_fraction(app):
    @app.task(max_attempts=1)
    def bad():
        deferq.current_job().progress(1.5)

    done = run_until(app, bad.enqueue(), JobState.DEAD)
    assert "progress must be from 0 to 1" in done.error and done.progress is None


def test_cancel_stops_a_running_async_task_at_its_next_await(app):
    reached = []

    @app.task(max_attempts=3)
    async def slow():
        reached.append("started")
        await asyncio.sleep(30)
        reached.append("finished")  # never: cancelled at the await

    job = slow.enqueue()
    worker, thread = start_worker(app)
    try:
        wait_for_state(app, job.id, JobState.ACTIVE)
        started = time.monotonic()
        assert app.cancel(job.id) is True
        done = wait_for_state(app, job.id, JobState.CANCELLED)
    finally:
        stop_worker(worker, thread)
    assert time.monotonic() - started < app.lease  # heard at the next heartbeat (every lease/3)
    assert reached == ["started"] and done.attempts == 1 and done.error == "cancelled while running"


def test_a_sync_task_sees_cancel_requested_and_ends_cancelled(app):
    @app.task(max_attempts=3)
    def careful():
        job = deferq.current_job()
        while not job.cancel_requested:
            time.sleep(0.02)
        return "stopped cleanly"

    job = careful.enqueue()
    worker, thread = start_worker(app)
    try:
        wait_for_state(app, job.id, JobState.ACTIVE)
        assert app.cancel(job.id) is True
        done = wait_for_state(app, job.id, JobState.CANCELLED)
    finally:
        stop_worker(worker, thread)
    assert done.attempts == 1 and done.result is None and done.cancel_requested is True


def test_a_job_not_started_before_it_expires_never_runs(app):
    ran = []

    @app.task()
    def report(n):
        ran.append(n)

    stale = report.options(expires=0.1).enqueue(1)
    fresh = report.options(expires=timedelta(minutes=5)).enqueue(2)
    time.sleep(0.2)
    assert deferq.worker.Worker(app, deferq.worker.WorkerConfig(burst=True)).run() == 0
    assert ran == [2]
    assert (app.get(stale.id).state, app.get(stale.id).error) == (JobState.CANCELLED, "expired")
    assert app.get(fresh.id).state == JobState.SUCCEEDED
    with pytest.raises(ValueError, match="expires"):
        report.options(expires=datetime(2030, 1, 1))  # no time zone


def test_debounce_runs_once_with_the_last_arguments(app):
    ran = []

    @app.task()
    def reindex(doc: int, version: int) -> None:
        ran.append(version)

    debounced = reindex.options(key="reindex:42", on_conflict="debounce", delay=0.3, max_wait=5)
    jobs = [debounced.enqueue(42, version) for version in range(5)]
    assert len({job.id for job in jobs}) == 1
    done = run_until(app, jobs[0], JobState.SUCCEEDED)
    assert ran == [4] and done.args == (42, 4)


def test_a_replacement_waits_for_the_running_job_with_its_key(app):
    spans = []
    release = threading.Event()  # the first run holds the key until the second is enqueued

    @app.task()
    def sync(account: int, label: str) -> None:
        start = time.monotonic()
        if label == "first":
            release.wait(10)
        spans.append((label, start, time.monotonic()))

    replacing = sync.options(key="sync:1", on_conflict="replace")
    first = replacing.enqueue(1, "first")
    worker, thread = start_worker(app)
    try:
        wait_for_state(app, first.id, JobState.ACTIVE)
        second = replacing.enqueue(1, "second")
        assert second.id != first.id
        release.set()
        wait_for_state(app, second.id, JobState.SUCCEEDED)
    finally:
        stop_worker(worker, thread)
    assert [label for label, *_ in spans] == ["first", "second"]
    assert spans[1][1] >= spans[0][2]  # one after the other, never side by side
