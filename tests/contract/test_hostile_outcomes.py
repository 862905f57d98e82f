"""One job's outcome never fails the settle of the others in its batch, on every store:
a wait from outside (a Retry-After of inf, NaN, the year 9999) is capped before the store
sees it (values.py), and a batch the store refuses settles one outcome at a time
(`Backend.settle_each`, what the worker falls back to)."""

from __future__ import annotations

import logging
import math
import threading

import deferq
from deferq.attempt.runner import RESULT_LIMIT
from deferq.backends.base import Outcome
from deferq.job import JobState
from deferq.values import MAX_DELAY, MAX_PAUSE
from deferq.worker import Worker, WorkerConfig

ALL = (0, 1, 2)


def leased(app, n):
    jobs = [app.enqueue("noop", [i]) for i in range(n)]
    taken = app.backend.reserve(["default"], n, "test-worker", 5.0, ALL)
    assert sorted(j.id for j in taken) == sorted(j.id for j in jobs)
    return sorted(taken, key=lambda job: job.id)


def burst(app, concurrency, timeout=20.0):
    """A worker of `concurrency` slots runs every due job here, then stops (bounded)."""
    worker = Worker(app, WorkerConfig(queues=("default",), concurrency=concurrency, burst=True))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the worker's burst did not end"


def test_a_hostile_wait_never_fails_the_settle_of_its_batch(app, backend):
    plain, *hostile = leased(app, 5)
    applied = backend.settle([
        Outcome(plain, "succeeded"),
        Outcome(hostile[0], "snooze", delay=math.inf),  # Backoff(retry_after="inf"), "1e400"
        Outcome(hostile[1], "retry", delay=math.nan, error="x"),
        Outcome(hostile[2], "snooze", due=math.inf),  # a durable sleep's end
        Outcome(hostile[3], "retry", delay=1e300, error="x"),
    ])
    assert applied == [True] * 5
    assert app.get(plain.id).state == JobState.SUCCEEDED
    latest = backend.now() + MAX_DELAY + 60
    for job in hostile:
        stored = app.get(job.id)
        assert stored.state in (JobState.SCHEDULED, JobState.QUEUED)
        assert stored.run_at is not None and math.isfinite(stored.run_at) and stored.run_at <= latest


def test_an_outcome_the_store_refuses_never_fails_the_others(app, backend, caplog):
    first, unstorable, last = leased(app, 3)
    batch = [Outcome(first, "succeeded", result=1), Outcome(unstorable, "succeeded", result={"x": object()}),
             Outcome(last, "retry", delay=30, error="boom")]
    with caplog.at_level(logging.ERROR, "deferq"):
        assert backend.settle_each(batch) == [True, True, True]
    assert app.get(first.id).result == 1
    assert app.get(unstorable.id).state == JobState.SUCCEEDED  # without the result it could not keep
    assert app.get(last.id).state == JobState.SCHEDULED
    refused = [r.getMessage() for r in caplog.records]  # the memory store keeps any object: none
    assert all(unstorable.id in line and "refused this attempt's outcome (succeeded)" in line for line in refused)


def test_a_worker_settles_every_job_beside_a_retry_after_of_inf(app, caplog):
    """The finding as a user meets it: a called service answers `Retry-After: inf` (or a
    date in 9999) to one job; every plain job run beside it ends, and the task's key is
    paused for seven days, not for ever."""
    ran = threading.Event()

    @app.task()
    def plain(i):
        ran.wait(5)  # the batch ends together: the hostile outcome shares its settle
        return i

    @app.task()
    def hostile(header):
        ran.set()
        raise deferq.Backoff(retry_after=header)

    jobs = [plain.enqueue(i) for i in range(3)]
    bad = [hostile.enqueue("inf"), hostile.enqueue("Fri, 31 Dec 9999 23:59:59 GMT")]
    with caplog.at_level(logging.WARNING, "deferq"):
        burst(app, concurrency=5)
    assert [app.get(j.id).state for j in jobs] == [JobState.SUCCEEDED] * 3
    now = app.backend.now()
    for job in bad:
        stored = app.get(job.id)
        assert stored.state == JobState.SCHEDULED and stored.attempts == 0
        assert now < stored.run_at <= now + MAX_PAUSE + 1  # seven days, not millennia
    assert 0 < app.limits.list()["hostile"]["paused_for"] <= MAX_PAUSE
    clamped = [r.getMessage() for r in caplog.records if "clamped to 604800 seconds (7 days)" in r.getMessage()]
    assert clamped and all("(hostile)" in line for line in clamped)


def test_a_worker_settles_every_job_beside_one_the_store_refuses(app):
    """PostgreSQL keeps no NUL in text or JSON: a task that returns one, or whose error
    holds one, must not fail the settle of the jobs beside it."""
    ran = threading.Event()

    @app.task()
    def plain(i):
        ran.wait(5)  # the batch ends together
        return i

    @app.task()
    def nul_result():
        ran.set()
        return "a\x00b"

    @app.task(max_attempts=1)
    def nul_error():
        raise ValueError("a\x00b")

    jobs = [plain.enqueue(i) for i in range(3)]
    returned, raised = nul_result.enqueue(), nul_error.enqueue()
    burst(app, concurrency=5)
    assert [app.get(j.id).result for j in jobs] == [0, 1, 2]
    assert app.get(returned.id).state == JobState.SUCCEEDED  # PostgreSQL: without its result
    failed = app.get(raised.id)
    assert failed.state == JobState.DEAD and "ValueError: a\\x00b" in failed.error  # the same on every store


def test_a_batch_of_large_results_settles_whole(app, backend):
    """Each result within RESULT_LIMIT, 17 MiB in all: past MariaDB's default packet of
    16 MiB, which a batch sent in one packet met as "server has gone away" at every try."""
    taken = leased(app, 17)
    result = "x" * (RESULT_LIMIT - 2)  # its JSON: RESULT_LIMIT bytes
    assert backend.settle([Outcome(job, "succeeded", result=result) for job in taken]) == [True] * 17
    assert all(app.get(job.id).result == result for job in taken[::8])


def test_a_worker_keeps_a_note_for_a_result_too_large_to_store(app, caplog):
    """A task that returns 17 MiB: a note is kept in its place (and said), and the jobs
    beside it settle; before, MariaDB refused the statement at every try and the worker
    took the store for down."""
    ran = threading.Event()

    @app.task()
    def plain(i):
        ran.wait(5)
        return i

    @app.task()
    def huge():
        ran.set()
        return "x" * (17 * 1024 * 1024)

    jobs = [plain.enqueue(i) for i in range(3)]
    big = huge.enqueue()
    with caplog.at_level(logging.WARNING, "deferq"):
        burst(app, concurrency=4, timeout=30)
    assert [app.get(j.id).result for j in jobs] == [0, 1, 2]
    kept = app.get(big.id)
    assert kept.state == JobState.SUCCEEDED and kept.result.startswith("result not kept: 17825794 bytes of JSON")
    said = [r.getMessage() for r in caplog.records if big.id in r.getMessage()]
    assert any("over the 1048576 a job keeps" in line for line in said)
